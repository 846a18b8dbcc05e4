"""Reading the CSV logs of ptxlab train and tools/torch_reference.py (--log, --log-steps).

Shared by tools/compare_steps.py and tools/plot_curves.py: the header is read and stripped, the
required columns checked, and every problem raised as InputError with the file (and line)."""
import csv


class InputError(Exception):
    pass


def read_rows(path, required, empty_hint="", missing_hint=""):
    """(columns, [(line number, row dict), ...]) of a CSV with a header holding `required`."""
    try:
        f = open(path, newline="")
    except OSError as e:
        raise InputError(f"{path}: cannot open ({e.strerror})")
    with f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None:
            raise InputError(f"{path}: empty file{empty_hint}")
        cols = [c.strip() for c in reader.fieldnames]
        reader.fieldnames = cols
        missing = [c for c in required if c not in cols]
        if missing:
            raise InputError(f"{path}: no column {' or '.join(missing)} in the header ({','.join(cols)}){missing_hint}")
        return cols, list(enumerate(reader, start=2))
