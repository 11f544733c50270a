"""The walk decides each folder's entries with what the folder shares computed once (its
configuration, real path, place below each .gitignore). These tests hold it to the per-path
definitions it stands for (`FileFinder._excluded`, `_gitignored`, `_key`), on a tree with the
shapes that make those differ: links to files and folders, a nested configuration, ignores."""

from __future__ import annotations

import os
from pathlib import Path

from gpulint.config import ConfigResolver
from gpulint.files import FileFinder, _key


def _tree(root: Path) -> Path:
    (root / ".git").mkdir(parents=True)
    (root / ".git" / "info").mkdir()
    (root / ".git" / "info" / "exclude").write_text("secret_*.py\n")
    (root / "pyproject.toml").write_text('[tool.gpulint]\nextend-exclude = ["gen/", "*_pb2.py"]\n')
    (root / ".gitignore").write_text("ignored/\n/top_only.py\n*.tmp.py\n")
    for rel in [
        "a.py",
        "top_only.py",
        "x.tmp.py",
        "secret_key.py",
        "msg_pb2.py",
        "pkg/b.py",
        "pkg/top_only.py",
        "pkg/gen/c.py",
        "gen/d.py",
        "ignored/e.py",
        "build/f.py",
        "sub/pyproject.toml",
        "sub/g.py",
        "sub/local/h.py",
        "sub/msg_pb2.py",
        "kernels/k.cu",
        "README.md",
    ]:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_text("import torch\n")
    (root / "sub" / "pyproject.toml").write_text('[tool.gpulint]\nexclude = ["local"]\n')
    (root / "sub" / ".gitignore").write_text("g.py\n")
    (root / "pkg" / "link_to_a.py").symlink_to(root / "a.py")
    (root / "pkg" / "link_to_gen.py").symlink_to(root / "gen" / "d.py")
    (root / "alias").symlink_to(root / "pkg", target_is_directory=True)
    (root / "pkg" / "dangling.py").symlink_to(root / "nowhere.py")
    return root


def _reference(finder: FileFinder, top: Path) -> list[Path]:
    """The walk as the per-path methods define it (no loop or outside-link handling needed
    for this tree)."""
    specs = list(finder._inherited_specs(top))
    seen: set[str] = set()
    out: list[Path] = []
    inodes = {os.stat(top).st_ino}

    def visit(directory: Path, specs: list) -> None:
        from gpulint.files import _gitignore_specs

        spec = _gitignore_specs(directory, finder.roots, [])
        if spec is not None:
            specs = [*specs, (Path(os.path.abspath(directory)), spec)]
        subdirs = []
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            path = Path(entry.path)
            is_dir = entry.is_dir()
            if finder._excluded(path, is_dir) or finder._gitignored(path, is_dir, specs):
                continue
            if is_dir:
                subdirs.append(path)
            elif finder._wanted(path) and _key(path) not in seen:
                seen.add(_key(path))
                out.append(path)
        for path in subdirs:  # a folder's files first, then its folders, as the walk goes
            if os.stat(path).st_ino not in inodes:
                inodes.add(os.stat(path).st_ino)
                visit(path, specs)

    visit(top, specs)
    return out


def test_walk_agrees_with_the_per_path_definitions(tmp_path, monkeypatch):
    root = _tree(tmp_path / "repo")
    monkeypatch.chdir(root)
    resolver = ConfigResolver()
    # (gen/ and build/ are excluded folders: walked when named, each entry is excluded by them)
    tops = (root, root / "pkg", root / "sub", Path("."), Path("sub"), root / "gen", Path("build"))
    for top in tops:
        finder = FileFinder(resolver(root), {".py", ".cu"}, True, False, config_for=resolver)
        found = list(finder.find([top]))
        assert found == _reference(finder, top), top
    names = {
        p.relative_to(root).as_posix()
        for p in FileFinder(resolver(root), {".py", ".cu"}, True, False, config_for=resolver).find(
            [root]
        )
    }
    # what the shapes above must come to, so the reference cannot drift with the walk
    # alias/ (a link to pkg/) sorts first and is walked; pkg/ is then the same folder again.
    # sub/ has its own configuration (exclude = ["local"]), which does not extend the top's.
    assert names == {
        "a.py",
        "kernels/k.cu",
        "alias/b.py",
        "alias/top_only.py",
        "alias/dangling.py",
        "sub/msg_pb2.py",
    }


def test_walk_keys_files_by_where_links_lead(tmp_path):
    root = _tree(tmp_path / "repo")
    resolver = ConfigResolver()
    finder = FileFinder(resolver(root), {".py"}, False, False, config_for=resolver)
    found = [p.relative_to(root).as_posix() for p in finder.find([root / "pkg", root])]
    # pkg/link_to_a.py and a.py are one file; alias/ and pkg/ one folder, walked once
    assert found.count("a.py") + found.count("pkg/link_to_a.py") == 1
    assert len([p for p in found if p.endswith("/b.py")]) == 1


def test_excludes_as_one_regex_answer_as_pathspec_does():
    import pathspec

    from gpulint.config import DEFAULT_EXCLUDE
    from gpulint.files import _NamePatterns, _OneRegex, _spec

    pattern_sets = [
        DEFAULT_EXCLUDE,
        [*DEFAULT_EXCLUDE, "gen/", "*_pb2.py", "/top.py", "docs/**/*.py", "a?c[0-9].py"],
        ["build", "!build/keep.py"],  # a negation: asked as pathspec would be
        [],
    ]
    paths = [
        "a.py",
        "build",
        "build/",
        "build/x.py",
        "build/keep.py",
        "src/build/x.py",
        "pkg/gen/c.py",
        "gen/",
        "x_pb2.py",
        "deep/x_pb2.py",
        "top.py",
        "sub/top.py",
        "docs/a/b/c.py",
        "abc1.py",
        "vendor/",
        "pkg/vendor/x.py",
        "vendored.py",
        "my.egg-info/",
        ".git/",
        "./build/x.py",
        "/abs/build/x.py",
        "thirdparty",
        "thirdparty/",
    ]
    for lines in pattern_sets:
        ours, theirs = _spec(lines), pathspec.GitIgnoreSpec.from_lines(lines)
        for path in paths:
            assert ours.match_file(path) == theirs.match_file(path), (lines, path)
    # the common case takes the fast way (no pathspec at all); others with a regex of their own
    assert isinstance(_spec(DEFAULT_EXCLUDE), _NamePatterns)
    assert isinstance(_spec([*DEFAULT_EXCLUDE, "docs/a/"]), _OneRegex)


def test_only_plain_name_patterns_are_matched_name_by_name():
    """The walk asks a spec of plain name patterns once per entry name (a path matches one
    exactly when its folder or its last component does); any other spec per path."""
    from gpulint.config import DEFAULT_EXCLUDE
    from gpulint.files import _component_wise

    assert _component_wise(DEFAULT_EXCLUDE)
    assert _component_wise(["gen/", "*_pb2.py", "# a comment", ""])
    for line in ("/top.py", "docs/*.py", "**/x", "!keep.py", "a\\#b"):
        assert not _component_wise(["build", line]), line


def test_plain_name_patterns_match_as_pathspec_does():
    """The default excludes and other plain name patterns are matched without pathspec; every
    answer is pathspec's (GitIgnoreSpec), on paths at every depth, folders with their slash."""
    import itertools

    import pathspec

    from gpulint.config import DEFAULT_EXCLUDE
    from gpulint.files import _NamePatterns, _spec

    pattern_sets = [
        list(DEFAULT_EXCLUDE),
        ["build", "*.py?", "a?c/", "x-y.z+", "# a comment", ""],
        [".*", "*_cache/", "data*"],
    ]
    names = ["build", "vendor", "a.egg-info", ".egg-info", "x.py", "x.pyc", "abc", "a/c", "data1"]
    names += [".git", "node_modules", "x-y.z+", "foo_cache", "src", "third_party", "v"]
    paths = {""}
    for depth in (1, 2, 3):
        for combo in itertools.product(names, repeat=depth):
            path = "/".join(combo)
            paths |= {path, path + "/", "./" + path, "/" + path}
    for lines in pattern_sets:
        ours = _spec(lines)
        assert isinstance(ours, _NamePatterns), lines
        theirs = pathspec.GitIgnoreSpec.from_lines(lines)
        wrong = [p for p in sorted(paths) if ours.match_file(p) != theirs.match_file(p)]
        assert not wrong, (lines, wrong[:5])
    # anything else is pathspec's own
    for lines in (["!keep"], ["a/b"], ["**/x"], ["[ab]c"], ["a\\ b"], ["sp ace"], ["*"], ["?/"]):
        assert not isinstance(_spec(lines), _NamePatterns), lines
