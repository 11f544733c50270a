"""The YAML front-end: launcher configs (`.yaml`, `.yml`), read with PyYAML's composer.

Only the launcher-shaped parts of a YAML file are read:
- environment sections: a key named `env`, `envs`, `environment`, `env_vars`, `envVars`,
  `environment_variables` or `variables` whose value is a mapping (`NCCL_ALGO: Tree`; GitHub
  Actions, SkyPilot, GitLab CI), a list of `KEY=value` strings (docker-compose) or a list of
  `{name: KEY, value: ...}` (Kubernetes);
- shell carried in the config: a string under `run`, `script`, `setup`, `command`, `commands`,
  `cmd`, `entrypoint`, `before_script` or `args` is read by the shell front-end (so `export
  NCCL_DEBUG=INFO` and `python -m torch.distributed.launch` in a `run: |` block are seen); a list
  of strings there is one command's words (Kubernetes `command: [...]`).
Everything else in the file (model hyper-parameters, paths) is left alone. Positions come from
PyYAML's node marks (0-based, code points), converted to 1-based. Rules see `EnvSetting`,
`ShellCommand` and `ConfigKey` nodes (every scalar key/value pair, for the lever registry).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from gpulint.diagnostics import Finding
from gpulint.envvars import EnvSetting, comments_around
from gpulint.frontends import ParseError, decode, noqa_by_line, noqa_comments_by_line, run_rules
from gpulint.frontends.shell import ShellCommand, ShellFile
from gpulint.settings import Settings
from gpulint.source import SourceText
from gpulint.suppression import NoqaComment

ENV_KEYS = {
    "env",
    "envs",
    "environment",
    "env_vars",
    "envvars",
    "environment_variables",
    "variables",
}
SHELL_KEYS = {
    "run",
    "script",
    "setup",
    "command",
    "commands",
    "cmd",
    "entrypoint",
    "before_script",
    "args",
}


@dataclass(frozen=True)
class ConfigKey:
    """A scalar `key: value` anywhere in the file (GPU901 reads config keys of refuted levers)."""

    key: str
    value: str
    line: int
    col: int
    end_line: int
    end_col: int

    @property
    def span(self) -> tuple[int, int, int, int]:
        return self.line, self.col, self.end_line, self.end_col


class YamlFile:
    language = "yaml"

    def __init__(self, display_path: str, text: str):
        self.display_path = display_path
        self.text = text
        self.source = SourceText(text)
        self.lines = [self.source.line_text(n) for n in range(1, self.source.line_count + 1)]
        self.nodes_by_type: dict[str, list[Any]] = {
            "EnvSetting": [],
            "ShellCommand": [],
            "ConfigKey": [],
        }
        try:
            documents = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        except yaml.MarkedYAMLError as e:
            mark = e.problem_mark or e.context_mark
            line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
            raise ParseError(f"YAML: {e.problem or e}", line, col) from None
        except yaml.YAMLError as e:
            raise ParseError(f"YAML: {e}") from None
        # An alias is the node it names, not a copy: each node is read once, so a "billion
        # laughs" file (aliases of aliases) costs its size, not its expansion.
        self._seen: set[int] = set()
        for document in documents:
            if document is not None:
                self._walk(document, depth=0)

    def span(self, node: Any) -> tuple[int, int, int, int]:
        span: tuple[int, int, int, int] = node.span
        return span

    # -- walking -----------------------------------------------------------------------------
    def _walk(self, node: yaml.Node, depth: int) -> None:
        if depth > 200 or id(node) in self._seen:
            return
        self._seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    continue
                name = str(key.value)
                if name.lower() in ENV_KEYS:
                    self._environment(value)
                elif name.lower() in SHELL_KEYS:
                    self._shell(value)
                if isinstance(value, yaml.ScalarNode):
                    self.nodes_by_type["ConfigKey"].append(
                        ConfigKey(name, str(value.value), *self._mark_span(key))
                    )
                self._walk(value, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                self._walk(item, depth + 1)

    def _mark_span(self, node: yaml.Node) -> tuple[int, int, int, int]:
        start, end = node.start_mark, node.end_mark
        return start.line + 1, start.column + 1, end.line + 1, end.column + 1

    def _environment(self, value: yaml.Node) -> None:
        if isinstance(value, yaml.MappingNode):
            for k, v in value.value:
                if isinstance(k, yaml.ScalarNode):
                    self._setting(str(k.value), v, k)
        elif isinstance(value, yaml.SequenceNode):
            for item in value.value:
                if isinstance(item, yaml.ScalarNode) and "=" in str(item.value):
                    name, _, val = str(item.value).partition("=")  # docker-compose "KEY=value"
                    self._setting(name.strip(), val, item)
                elif isinstance(item, yaml.MappingNode):  # Kubernetes {name: KEY, value: V}
                    fields = {
                        str(k.value): v for k, v in item.value if isinstance(k, yaml.ScalarNode)
                    }
                    name_node = fields.get("name")
                    if isinstance(name_node, yaml.ScalarNode):
                        self._setting(str(name_node.value), fields.get("value"), name_node)

    def _setting(self, name: str, value: yaml.Node | None, at: yaml.Node) -> None:
        if not name.isidentifier():
            return
        if isinstance(value, yaml.ScalarNode):
            literal = str(value.value)
            end = value.end_mark
        elif isinstance(value, str):
            literal = value
            end = at.end_mark
        else:
            literal = None
            end = at.end_mark
        if literal is not None and ("$" in literal or "{{" in literal):
            literal = None
        line, col, _, _ = self._mark_span(at)
        own = self._comment_after(end.line, end.column)
        comments = comments_around(self.lines, line - 1, own)
        self.nodes_by_type["EnvSetting"].append(
            EnvSetting(name, literal, line, col, line, col + len(name), comments)
        )

    def _comment_after(self, line0: int, col0: int) -> str | None:
        """The comment on 0-based `line0` after 0-based column `col0` (PyYAML drops comments)."""
        if line0 >= len(self.lines):
            return None
        rest = self.lines[line0][col0:].strip()
        return rest if rest.startswith("#") else None

    def _shell(self, value: yaml.Node) -> None:
        if isinstance(value, yaml.SequenceNode):
            words = [item for item in value.value if isinstance(item, yaml.ScalarNode)]
            if words and len(words) == len(value.value):
                # `command: ["bash", "-c", "export X=1; python ..."]`: the -c string is shell.
                texts = [str(w.value) for w in words]
                if len(texts) >= 3 and texts[1] == "-c" and texts[0].endswith("sh"):
                    self._shell(words[2])
                    return
                if any("\n" in t or ";" in t or "&&" in t for t in texts):
                    for w in words:
                        self._shell(w)
                    return
                line, col, end_line, end_col = self._mark_span(words[0])
                self.nodes_by_type["ShellCommand"].append(
                    ShellCommand(tuple(texts), line, col, end_line, end_col)
                )
            return
        if not isinstance(value, yaml.ScalarNode) or not isinstance(value.value, str):
            return
        shell = ShellFile(self.display_path, value.value)
        for kind in ("EnvSetting", "ShellCommand"):
            for node in shell.nodes_by_type[kind]:
                self.nodes_by_type[kind].append(self._moved(node, value, shell))

    def _moved(self, node: Any, scalar: yaml.ScalarNode, shell: ShellFile) -> Any:
        """A node found in a scalar's text, placed in the YAML file's coordinates."""
        from dataclasses import replace

        start = scalar.start_mark
        if scalar.style in ("|", ">"):
            # Block scalar: content starts on the next line, at the block's indentation.
            first = start.line + 1
            line0 = first + node.line - 1
            raw = self.lines[line0] if line0 < len(self.lines) else ""
            indent = len(raw) - len(raw.lstrip(" "))
            if scalar.style == ">":
                return replace(
                    node,
                    line=first + 1,
                    col=indent + 1,
                    end_line=first + 1,
                    end_col=indent + 2,
                    **_no_comments(node),
                )
            line, col = line0 + 1, indent + node.col
            end_col = indent + node.end_col
        elif node.line == 1:
            quote = 1 if scalar.style in ("'", '"') else 0
            line, col = start.line + 1, start.column + 1 + quote + node.col - 1
            end_col = col + (node.end_col - node.col)
        else:
            line, col, end_col = start.line + 1, start.column + 1, start.column + 2
        extra: dict[str, Any] = {}
        if isinstance(node, EnvSetting):
            own = self._comment_after(line - 1, end_col - 1)
            extra["comments"] = tuple({*node.comments, *comments_around(self.lines, line - 1, own)})
        return replace(node, line=line, col=col, end_line=line, end_col=end_col, **extra)


def _no_comments(node: object) -> dict[str, Any]:
    return {}


class YamlFrontend:
    language = "yaml"
    extensions = (".yaml", ".yml")

    def parse(self, display_path: str, data: bytes, settings: Settings) -> YamlFile:
        return YamlFile(display_path, decode(data))

    def run(self, parsed: YamlFile, rules: Sequence[Any]) -> Iterable[Finding]:
        return run_rules(parsed, rules, lambda kind: parsed.nodes_by_type.get(kind, ()))

    def noqa_lines(self, parsed: YamlFile) -> dict[int, frozenset[str]]:
        return noqa_by_line(parsed.source)

    def noqa_comments(self, parsed: YamlFile) -> list[NoqaComment]:
        return noqa_comments_by_line(parsed.source, "#")


FRONTEND = YamlFrontend()
