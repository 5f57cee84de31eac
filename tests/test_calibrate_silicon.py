"""Reading the user's measured rows (``spica calibrate``'s input): each row with its line in the file, and an
error naming the file and line for a header or a value the replay cannot use."""
from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest

from spica_core.calibrate.silicon import load_rows, parse_row, read_rows, silicon_csv
from spica_core.errors import CalibrationInputError, SpicaError


def real_rows(n: int = 3) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the first ``n`` rows of aiconfigurator-core's silicon_sample.csv."""
    with open(silicon_csv(), newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(itertools.islice(reader, n))


def write_csv(path: Path, header: list[str], rows: list[dict[str, str]], blank_before_last: bool = False) -> Path:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(header)
        for i, row in enumerate(rows):
            if blank_before_last and i == len(rows) - 1:
                f.write("\n")
            w.writerow([row.get(c, "") for c in header])
    return path


def test_each_row_comes_with_its_line_even_after_a_quoted_newline_and_a_blank_line(tmp_path: Path) -> None:
    header, rows = real_rows()
    rows[1] = {**rows[1], "silicon_data_source": rows[1]["silicon_data_source"] + "\nsecond line of the note"}
    path = write_csv(tmp_path / "measured.csv", header, rows, blank_before_last=True)
    # line 1 header, 2 the first row, 3–4 the second (its quoted note spans two lines), 5 blank, 6 the third
    got = read_rows(path)
    assert [line for line, _ in got] == [2, 3, 6]
    assert [r for _, r in got] == [parse_row(r) for r in rows]


def test_the_real_sample_reads_as_load_rows_reads_it() -> None:
    got = read_rows(silicon_csv())
    assert got[0][0] == 2
    assert [r for _, r in got] == load_rows()


def test_a_missing_required_column_is_named_on_line_1(tmp_path: Path) -> None:
    header, rows = real_rows()
    header = [c for c in header if c not in ("isl", "silicon_tpot_ms")]
    path = write_csv(tmp_path / "measured.csv", header, rows)
    with pytest.raises(CalibrationInputError) as err:
        read_rows(path)
    assert str(err.value).startswith(f"{path}:1: missing required column(s) isl, silicon_tpot_ms")
    assert isinstance(err.value, SpicaError)   # the CLI prints it without a traceback


def test_an_unknown_column_is_named_with_the_allowed_ones(tmp_path: Path) -> None:
    header, rows = real_rows()
    path = write_csv(tmp_path / "measured.csv", [*header, "gpu_clock_mhz"], rows)
    with pytest.raises(CalibrationInputError) as err:
        read_rows(path)
    message = str(err.value)
    assert message.startswith(f"{path}:1: unknown column(s) gpu_clock_mhz; allowed: ")
    assert ", ".join(sorted(header)) in message


def test_an_empty_file_misses_every_required_column(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("")
    with pytest.raises(CalibrationInputError, match="missing required column"):
        read_rows(path)


@pytest.mark.parametrize(("column", "value", "what"), [
    ("isl", "long", "isl must be an integer"),
    ("isl", "1024.5", "isl must be an integer"),
    ("osl", "", "osl must be an integer"),
    ("silicon_ttft_ms", "", "silicon_ttft_ms must be a positive number of ms"),
    ("silicon_ttft_ms", "0", "silicon_ttft_ms must be a positive number of ms"),
    ("silicon_ttft_ms", "nan", "silicon_ttft_ms must be a positive number of ms"),
    ("silicon_tpot_ms", "-2.5", "silicon_tpot_ms must be a positive number of ms"),
    ("silicon_tpot_ms", "fast", "silicon_tpot_ms must be a positive number of ms"),
])
def test_a_bad_value_names_the_file_and_its_line(tmp_path: Path, column: str, value: str, what: str) -> None:
    header, rows = real_rows()
    rows[0] = {**rows[0], "silicon_data_source": "a note\nover two lines"}   # the first row is lines 2–3
    rows[1] = {**rows[1], column: value}                                     # so the second is line 4
    path = write_csv(tmp_path / "measured.csv", header, rows)
    with pytest.raises(CalibrationInputError) as err:
        read_rows(path)
    assert str(err.value) == f"{path}:4: {what}, got {value!r}"


def test_an_integral_float_length_is_an_integer(tmp_path: Path) -> None:
    """A spreadsheet's export may write 1024 as 1024.0; the row reads as before (parse_row's int(float(...)))."""
    header, rows = real_rows(1)
    path = write_csv(tmp_path / "measured.csv", header, [{**rows[0], "isl": f"{rows[0]['isl']}.0"}])
    [(line, row)] = read_rows(path)
    assert (line, row.isl) == (2, int(rows[0]["isl"]))


def test_a_file_that_is_not_utf8_is_named_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"id,model_path\n\xff\xfe,bad\n")
    with pytest.raises(CalibrationInputError, match=f"{path}:1: not a UTF-8 CSV file"):
        read_rows(path)
