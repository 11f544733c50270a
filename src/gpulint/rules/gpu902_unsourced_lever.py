from collections.abc import Iterator
from typing import ClassVar

from gpulint.diagnostics import Finding, Severity
from gpulint.frontends.leverfile import LeverEntry, LeverFile
from gpulint.levers import LeverError, check_entry
from gpulint.rule import Exemption, Rule


class UnsourcedLever(Rule):
    """
    ## What it does
    Finds an entry of the user's lever registry (`[[tool.gpulint.levers]]` in pyproject.toml,
    or `[[levers]]` in a `levers.toml` beside it) whose refuting fact carries no `source`, or
    whose `source` is empty. An entry with a source (a bench record, a file in the repository,
    an upstream issue) is cited, whatever its status.

    ## Why is this bad?
    A refuted lever stops work: GPU901 tells everyone not to re-attempt it. If the refuting fact
    has no source, nobody can check it, and a wrong kill persists unchallenged: "an unsourced
    refuting fact is how a wrong kill persists". Cite the record that refutes it, or mark the
    entry as UNSOURCED so GPU901's message says the refutation itself needs a source.

    ## Example
    ```toml
    [[tool.gpulint.levers]]
    name = "torch.compile for the decoder"
    targets = ["sm_121"]
    fact = "Slower than eager on the Spark."
    imports = ["torch._dynamo"]
    ```

    ## Use instead
    ```toml
    [[tool.gpulint.levers]]
    name = "torch.compile for the decoder"
    targets = ["sm_121"]
    fact = "1.21 -> 1.34 s/step with compile (5 runs, median, spread 3%)."
    status = "SOURCED"
    source = ".gpulint/evidence/20261202T101500Z-train-step-4242.json"
    imports = ["torch._dynamo"]
    ```

    ## References
    - [CUDA C++ Best Practices Guide: measure before optimising (APOD)](https://docs.nvidia.com/cuda/pdf/CUDA_C_Best_Practices_Guide.pdf)
    - [Nsight Systems user guide: profile to find the real bottleneck](https://docs.nvidia.com/nsight-systems/UserGuide/)
    """

    code = "GPU902"
    tier = "pedantic"  # judged precision below 0.9, or unmeasured: bench/precision
    name = "unsourced-lever"
    severity = Severity.INFO  # advice: cite the refuting fact
    language = "toml"
    triggers = ("levers",)
    message = (
        'lever `{name}` has no source for its refuting fact: cite one (`source = "..."`: a bench '
        "record, a file, an upstream issue) before it can justify not doing this work"
    )
    tags = ("levers",)
    example_filename = "levers.toml"

    EXEMPTIONS: ClassVar[tuple[Exemption, ...]] = (
        Exemption(
            "malformed-entry",
            "An entry the registry refuses (an unknown key, no `fact`, a bad status): a "
            "configuration error, reported when the registry is loaded.",
            '[[levers]]\nname = "x"\nfact = "slower"\nstatus = "refuted?"\n',
        ),
    )

    VALID = [
        '[[levers]]\nname = "x"\nfact = "1.2 -> 1.4 s/step (5 runs)"\nsource = ".gpulint/evidence/a.json"\ntargets = ["sm_121"]\n',
        "[other]\nlevers = 1\n",
    ]
    INVALID = [
        '[[levers]]\nname = "x"\nfact = "slower"\ntargets = ["sm_121"]\nimports = ["xformers"]\n',
        '[[levers]]\nname = "y"\nfact = "slower"\nsource = "  "\nstatus = "SOURCED"\n',
    ]

    def visit_LeverEntry(self, node: LeverEntry, file: LeverFile) -> Iterator[Finding]:
        entry = node.entry
        try:
            check_entry(entry, f"levers[{node.index}]")
        except LeverError:
            malformed = True
        else:
            malformed = False
        if self.exempt("malformed-entry", malformed):
            return  # a configuration error, reported when it is loaded
        if str(entry.get("source", "")).strip():
            return
        yield self.report(file, node, name=entry.get("name", "?"))
