"""Reading MNIST IDX files (raw or .gz) into numpy arrays, for the tools in this folder."""
import gzip
import os

import numpy as np


def read_idx(path):
    """The array in an IDX file of unsigned bytes; `path` may name the file with or without .gz."""
    gz = path + ".gz"
    with (gzip.open(gz, "rb") if os.path.exists(gz) else open(path, "rb")) as f:
        data = f.read()
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndims).reshape(dims)
