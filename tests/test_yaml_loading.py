"""load_yaml: bounded reading and parsing of config files, and errors a user can act on."""
from __future__ import annotations

import inspect
import os
import sys
import time
from pathlib import Path

import pytest
import yaml

from spica_core.config import yaml_loading
from spica_core.config.yaml_loading import MAX_CONFIG_BYTES, MAX_YAML_DEPTH, load_yaml
from spica_core.errors import ConfigError, Issue

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def write(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "config.yaml"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path


def refused(path: Path) -> list[Issue]:
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert info.value.source == str(path)
    return info.value.issues


def only_message(path: Path) -> str:
    issues = refused(path)
    assert len(issues) == 1, issues
    return issues[0].message


def billion_laughs(levels: int = 9, width: int = 9) -> str:
    names = [chr(ord("a") + i) for i in range(levels)]
    lines = [f"a: &a [{', '.join(['1'] * width)}]"]
    lines += [f"{name}: &{name} [{', '.join(['*' + prev] * width)}]" for prev, name in zip(names, names[1:])]
    return "\n".join(lines + [f"gpu_budget: *{names[-1]}", ""])


# ------------------------------------------------------------------ valid input


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_bundled_examples_load_as_safe_load_does(example: Path) -> None:
    data = load_yaml(example)
    assert isinstance(data, dict) and "search_space" in data
    assert data == yaml.safe_load(example.read_text(encoding="utf-8"))


def test_utf8_bom_and_empty_file(tmp_path: Path) -> None:
    assert load_yaml(write(tmp_path, b"\xef\xbb\xbfname: caf\xc3\xa9\n")) == {"name": "café"}
    assert load_yaml(write(tmp_path, "")) is None


def test_merge_keys_and_overrides_after_a_merge_are_allowed(tmp_path: Path) -> None:
    text = "base: &base {ttft_ms: 2000, itl_ms: 40}\ngoal:\n  sla:\n    <<: *base\n    itl_ms: 50\n"
    assert load_yaml(write(tmp_path, text)) == {
        "base": {"ttft_ms": 2000, "itl_ms": 40}, "goal": {"sla": {"ttft_ms": 2000, "itl_ms": 50}}}


def test_small_aliases_load(tmp_path: Path) -> None:
    text = "sla: &sla {ttft_ms: 2000, itl_ms: 40}\ngoal: {sla: *sla}\nother: {sla: *sla}\n"
    data = load_yaml(write(tmp_path, text))
    assert data == yaml.safe_load(text)
    assert data["goal"]["sla"] == data["other"]["sla"] == {"ttft_ms": 2000, "itl_ms": 40}


# ------------------------------------------------------------------ duplicate keys


def test_duplicate_top_level_key_names_both_lines(tmp_path: Path) -> None:
    path = write(tmp_path, "search_space: {}\nworkload: {}\nsearch_space: {}\n")
    assert refused(path) == [Issue("search_space", "duplicate key: first at line 1, again at line 3; "
                                                   "YAML would silently keep the last value")]


def test_every_nested_duplicate_key_is_reported_with_its_dotted_path(tmp_path: Path) -> None:
    text = ("search_space:\n  model_name: m\n  gpu_budget: 8\n  gpu_budget: 1000\n"
            "goal:\n  sla:\n    ttft_ms: 1\n    ttft_ms: 2\n"
            "list:\n  - {a: 1, a: 2}\n")
    issues = refused(write(tmp_path, text))
    assert [(i.path, i.message.split(";")[0]) for i in issues] == [
        ("search_space.gpu_budget", "duplicate key: first at line 3, again at line 4"),
        ("goal.sla.ttft_ms", "duplicate key: first at line 7, again at line 8"),
        ("list[0].a", "duplicate key: first at line 10, again at line 10"),
    ]


def test_keys_equal_once_constructed_are_duplicates(tmp_path: Path) -> None:
    issues = refused(write(tmp_path, "1: a\n1.0: b\n"))
    assert [(i.path, i.message.split(";")[0]) for i in issues] == [("1.0", "duplicate key: first at line 1, again at line 2")]


# ------------------------------------------------------------------ expansion and depth


def test_billion_laughs_is_refused_fast(tmp_path: Path) -> None:
    path = write(tmp_path, billion_laughs())
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert time.perf_counter() - start < 1.0
    assert len(str(info.value)) < 500
    (issue,) = info.value.issues
    assert issue.message.startswith("aliases expand to more than 100,000 values (an alias bomb? first alias at line 2)")


def test_many_plain_values_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(yaml_loading, "MAX_YAML_NODES", 1000)  # the real bound takes seconds to reach
    assert load_yaml(write(tmp_path, "x: [" + ",".join(["1"] * 997) + "]\n")) == {"x": [1] * 997}  # root, key, list: 1000
    issues = refused(write(tmp_path, "x: [" + ",".join(["1"] * 5000) + "]\n"))
    assert issues == [Issue("x[997]", "holds more than 1,000 values; a config holds a few hundred")]


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    issues = refused(write(tmp_path, "a: &a\n  b: *a\n"))
    assert issues == [Issue("a.b", "the alias at line 2 refers to a value that contains it (a recursive alias)")]


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    message = only_message(write(tmp_path, "a: " + "[" * 1000 + "]" * 1000 + "\n"))
    assert message == f"nested deeper than {MAX_YAML_DEPTH} levels (at line 1)"
    ok = "a: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1) + "\n"
    assert load_yaml(write(tmp_path, ok)) == yaml.safe_load(ok)


def test_depth_counts_what_aliases_expand_to(tmp_path: Path) -> None:
    half = MAX_YAML_DEPTH // 2 + 1
    text = f"a: &a {'[' * half}{']' * half}\nb: {'[' * half}*a{']' * half}\n"
    assert only_message(write(tmp_path, text)) == f"nested deeper than {MAX_YAML_DEPTH} levels once the alias at line 2 is expanded"


def test_recursion_error_becomes_the_depth_error(tmp_path: Path) -> None:
    path = write(tmp_path, "a: " + "[" * 40 + "]" * 40 + "\n")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 60)
    try:
        message = only_message(path)
    finally:
        sys.setrecursionlimit(limit)
    assert message == f"nested deeper than {MAX_YAML_DEPTH} levels"


# ------------------------------------------------------------------ size, encoding, reading


def test_huge_file_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    with path.open("wb") as fh:
        fh.truncate(45_000_000)  # sparse: no disk used, and reading it would take long
    assert only_message(path) == "is 42.9 MiB (45,000,000 bytes); a config file may be at most 1 MiB"


def test_endless_device_is_refused_by_the_read_bound() -> None:
    assert os.stat("/dev/zero").st_size <= MAX_CONFIG_BYTES
    start = time.perf_counter()
    assert only_message(Path("/dev/zero")) == \
        "is more than 1 MiB (reading stopped there); a config file may be at most 1 MiB"
    assert time.perf_counter() - start < 1.0


def test_latin1_byte_names_offset_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, b"search_space:\n  model_name: caf\xe9\n")
    assert only_message(path) == ("not UTF-8 text: byte 0xe9 at offset 31 (line 2, column 18); "
                                  "save the file as UTF-8")


def test_binary_file_is_refused(tmp_path: Path) -> None:
    assert only_message(write(tmp_path, b"\x7fELF\x02\x01\x01\x00\x00\xff")) == \
        "is a binary file, not YAML: NUL byte at offset 7 (line 1, column 8)"


def test_utf16_file_is_named(tmp_path: Path) -> None:
    assert only_message(write(tmp_path, "a: 1\n".encode("utf-16"))) == \
        "is UTF-16 or UTF-32 text, not UTF-8; save the file as UTF-8"


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert only_message(tmp_path / "nope.yaml") == "config file not found"
    assert only_message(tmp_path) == "cannot read config file: Is a directory"


# ------------------------------------------------------------------ malformed YAML


def test_python_tags_are_refused_and_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = write(tmp_path, f'x: !!python/object/apply:os.system ["touch {marker}"]\n')
    assert only_message(path) == ("malformed YAML at line 1, column 4: could not determine a constructor for the "
                                  "tag 'tag:yaml.org,2002:python/object/apply:os.system'")
    assert not marker.exists()


def test_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    message = only_message(write(tmp_path, "search_space:\n  a: 1\n b: 2\n"))
    assert message.startswith("malformed YAML at line 3, column 2: ")


def test_control_character_gives_line_and_column(tmp_path: Path) -> None:
    assert only_message(write(tmp_path, "a: 1\nb: x\x07\n")) == \
        "malformed YAML at line 2, column 5: unacceptable character #x0007 (special characters are not allowed)"


def test_bad_explicit_scalar_is_a_yaml_error_not_a_traceback(tmp_path: Path) -> None:
    assert only_message(write(tmp_path, "a: 1\nb: !!int abc\n")) == \
        "malformed YAML at line 2, column 4: 'abc' is not a valid !!int"


def test_messages_echo_only_a_short_excerpt(tmp_path: Path) -> None:
    message = only_message(write(tmp_path, "a: *" + "x" * 5000 + "\n"))
    assert message.startswith("malformed YAML at line 1, column 4: found undefined alias 'xxx")
    assert len(message) < 150


def test_duplicates_are_reported_with_a_later_syntax_error(tmp_path: Path) -> None:
    issues = refused(write(tmp_path, "a: 1\na: 2\nb: [\n"))
    assert [i.path for i in issues] == ["a", ""]
    assert issues[1].message.startswith("malformed YAML at line 4")
