import re

from gpulint.diagnostics import Severity
from gpulint.frontends.cuda.file import CudaFile
from gpulint.rule import Rule

# What some CUDA rule looks at: launches, runtime calls, barriers, device printf, shared memory.
_LOOKED_AT = re.compile(rb"<<<|\bcuda[A-Z]\w*\s*\(|__syncthreads|\bprintf\s*\(|__shared__")


class CudaLinesNotAnalysed(Rule):
    """
    ## What it does
    Says, once per file, how many lines the CUDA rules skipped because tree-sitter could not
    parse them (heavy macro use, template syntax the grammar does not know, a `#define` body
    that launches a kernel but is not a statement), when those lines hold something a CUDA rule
    would judge: a kernel launch, a CUDA runtime call, `__syncthreads`, `printf`, `__shared__`.
    Regions without any of these (a vendored JSON library, template metaprogramming) are not
    reported: nothing was missed there. Code the preprocessor drops (`#if 0`) is not counted;
    nor is the other configuration of a file whose `#ifdef` branches open or close braces of
    the code around them (`#ifdef SPARSE` / `} else {` / `#endif`), which tree-sitter cannot
    parse as written: such a file is read with those branches' macros undefined.

    It is a note on the analysis, not a finding: it is not counted among the findings and does
    not change the exit status. `gpulint check` prints it on stderr
    (`path:line:col: note: GPU800 ...`, not with `--quiet`), JSON output lists it under
    `diagnostics`, SARIF under `invocations[0].toolExecutionNotifications` (level `note`), the
    language server shows it as an information diagnostic (the flake8 plugin, which only sees
    files that parse as Python, prints any note on stderr). Deselect it (`--ignore GPU800`) or `per-file-ignores` to hear nothing.

    ## Why is this bad?
    It is not a defect of the code but of the analysis: the other findings of the file say
    nothing about these lines, and silence there is not a clean bill. Knowing where the linter
    did not look tells you where to review by hand, or which construct to report upstream.

    ## Example
    ```cuda
    __global__ void k(float* x) {}
    void run(float* x) {
      LAUNCH_WITH(k, <<<1, 128>>>, x);  // a launch split across macro arguments
    }
    ```

    ## Use instead
    ```cuda
    // Nothing to change in the code; review the reported lines by hand, or silence the note
    // for the file with `per-file-ignores` if they are known to be fine.
    ```

    ## References
    - [tree-sitter-cuda grammar](https://github.com/tree-sitter-grammars/tree-sitter-cuda)
    """

    code = "GPU800"
    name = "cuda-lines-not-analysed"
    severity = Severity.INFO
    language = "cuda"
    triggers = ("<<<", "cuda", "__syncthreads", "printf", "__shared__")
    message = (
        "{count} line{s} not analysed (first at line {first}): tree-sitter could not parse "
        "{them}, and {they} hold{verb} {what}; the CUDA rules did not look there"
    )
    tags = ("analysis",)

    VALID = [
        """
__global__ void k(float* x) {}
void run(float* x) { k<<<1, 128>>>(x); }
""",
    ]
    INVALID = [
        """
__global__ void k(float* x) {}
void run(float* x) {
  k<<<1, 100>>>(x)  ))) }}} template <<< ;
}
""",
    ]

    def finish(self, file: CudaFile):
        lines = file.lines_not_analysed
        if not lines:
            return
        source = file.data.split(b"\n")
        hits = set()
        for number in lines:
            if number - 1 < len(source):
                for m in _LOOKED_AT.finditer(source[number - 1]):
                    hits.add(_KIND.get(m.group(0)[:3], "a CUDA runtime call"))
        if not hits:
            return
        first = lines[0]
        node = _Line(file, first)
        many = len(lines) > 1
        yield self.report(
            file,
            node,
            count=len(lines),
            s="s" if many else "",
            first=first,
            them="them" if many else "it",
            they="they" if many else "it",
            verb="" if many else "s",
            what=", ".join(sorted(hits)),
        )


_KIND = {b"<<<": "a kernel launch", b"__s": "a barrier or shared memory", b"pri": "printf"}


class _Line:
    """A whole source line as a reportable span (what `file.span` reads)."""

    def __init__(self, file: CudaFile, number: int):
        start = 0
        for _ in range(number - 1):
            start = file.data.index(b"\n", start) + 1
        end = file.data.find(b"\n", start)
        self.start_byte = start
        self.end_byte = len(file.data) if end < 0 else end
