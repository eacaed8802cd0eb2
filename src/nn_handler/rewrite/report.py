"""RewriteReport: what a rewrite planned, wrote, copied as stored, left out and verified."""

from __future__ import annotations

from dataclasses import dataclass, field

from .._validate import format_bytes
from .plan import RewritePlan
from .verify import VerifyResult

__all__ = ["RewriteReport"]


@dataclass(frozen=True)
class RewriteReport:
    """The result of ``rewrite_file``.

    Attributes:
        source: The input path or URL.
        output: The output path (None for a dry run).
        plan: What was (or, for a dry run, would be) written.
        input_bytes: Size of the input file.
        output_bytes: Size of the output file (0 for a dry run).
        seconds: Time spent writing (verification apart).
        verify_seconds: Time spent verifying.
        rows_written: Rows written by the rewrite (copies as stored not counted).
        copied: Datasets copied as stored, each with the reason.
        skipped: What was left out (attributes holding references, scales not written), why.
        verified: What the verification compared, per dataset.
        unverified: Datasets the verification could not read, with the reason.
    """

    source: str
    output: str | None
    plan: RewritePlan
    input_bytes: int
    output_bytes: int = 0
    seconds: float = 0.0
    verify_seconds: float = 0.0
    rows_written: int = 0
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    verified: list[VerifyResult] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)

    @property
    def rows_per_s(self) -> float:
        """Rows written per second."""
        return self.rows_written / self.seconds if self.seconds > 0 else 0.0

    def format(self) -> str:
        """A short human summary (what the command line prints)."""
        if self.output is None:
            return self.plan.format()
        ratio = self.output_bytes / self.input_bytes if self.input_bytes else 0.0
        lines = [
            f"wrote {self.output}: {format_bytes(self.output_bytes)} "
            f"(input {format_bytes(self.input_bytes)}, {ratio:.2f}x) in {self.seconds:.1f} s, "
            f"{self.rows_per_s:,.0f} rows/s",
        ]
        if self.plan.rows is not None:
            lines.append(
                f"rows shuffled: {self.plan.rows} (seed {self.plan.seed}); output row i is input "
                f"row /{self.plan.row_order_key}[i]"
            )
        lines.extend(f"copied as stored: {c}" for c in self.copied)
        lines.extend(f"not carried over: {s}" for s in self.skipped)
        lines.extend(self._verify_lines())
        return "\n".join(lines)

    def _verify_lines(self) -> list[str]:
        if not self.verified and not self.unverified:
            return ["not verified (verify=False)"]
        sampled = [v for v in self.verified if v.sampled]
        checked = sum(v.rows_checked for v in self.verified)
        text = (
            f"verified in {self.verify_seconds:.1f} s: {checked} rows of {len(self.verified)} "
            "datasets equal to the input"
        )
        if sampled:
            text += f" ({len(sampled)} by a seeded sample of rows, seed 0)"
        return [text, *(f"not verified: {u}" for u in self.unverified)]
