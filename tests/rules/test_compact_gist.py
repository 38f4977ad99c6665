"""What a cleared result's placeholder keeps (``compact.gist_chars``): the names, paths,
line numbers, frames and errors an agent's next command reuses, the innermost frames
first when a traceback does not fit, and nothing for code that merely names an error."""

from __future__ import annotations

from context_engine.rules.compact.gist import skeleton

CHAINED = "\n".join([
    "Traceback (most recent call last):",
    '  File "/testbed/app/runner.py", line 254, in apply',
    "    self.record(migration)",
    '  File "/testbed/app/runner.py", line 269, in record',
    '  File "/testbed/app/recorder.py", line 94, in record_applied',
    '  File "/testbed/app/models/query.py", line 560, in create',
    '  File "/testbed/app/models/base.py", line 830, in save',
    '  File "/testbed/app/models/sql/compiler.py", line 1571, in execute_sql',
    "app.db.utils.OperationalError: no such table: app_item",
])


def test_a_traceback_too_long_for_the_limit_keeps_its_innermost_frames_and_the_error() -> None:
    whole = skeleton(CHAINED, 10_000)
    assert whole.count("File ") == 6  # every frame, once, when they fit
    gist = skeleton(CHAINED, 300)
    assert len(gist) <= 300
    assert 'File "/testbed/app/models/sql/compiler.py", line 1571, in execute_sql' in gist
    assert "app.db.utils.OperationalError: no such table: app_item" in gist
    assert "runner.py" not in gist  # the outermost frames made room
    assert gist.index("compiler.py") < gist.index("OperationalError")  # still in order


def test_code_that_names_an_error_is_not_an_error_report() -> None:
    code = "\n".join([
        "   628\t    def __setitem__(self, key, val):",
        "   629\t        try:",
        "   630\t            cls.validate[key](val)",
        "   631\t        except ValueError as ve:",
        '   632\t            raise ValueError(f"Key {key}: {ve}") from None',
        "   633\t        except KeyError as err:",
    ])
    assert skeleton(code, 300) == "628 def __setitem__"
    output = "\n".join([
        "E   AssertionError: assert 'a' == 'b'",
        "FAILED tests/test_parse.py::test_split - AssertionError",
        "KeyError: 'backend'",
        "ModuleNotFoundError: No module named 'trustme'",
    ])
    assert skeleton(output, 300).split(" | ") == [
        "E AssertionError: assert 'a' == 'b'",
        "FAILED tests/test_parse.py::test_split - AssertionError",
        "KeyError: 'backend'",
        "ModuleNotFoundError: No module named 'trustme'",
    ]


def test_search_hits_keep_their_path_with_or_without_a_line_number() -> None:
    hits = "\n".join([
        "sphinx/ext/autodoc/importer.py:        for (ns, name) in analyzer.find_attr_docs():",
        "sphinx/ext/autodoc/__init__.py:            attr_docs = self.analyzer.find_attr_docs()",
        "sphinx/ext/autodoc/__init__.py:            self.analyzer.find_attr_docs()",
        "requests/models.py:355:    def prepare_url(self, url, params):",
        "    self.value: int = 3",
    ])
    assert skeleton(hits, 300).split(" | ") == [
        "sphinx/ext/autodoc/importer.py", "sphinx/ext/autodoc/__init__.py", "requests/models.py:355"]


def test_no_limit_no_skeleton() -> None:
    assert skeleton(CHAINED, 0) == ""
