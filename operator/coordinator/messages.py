"""What the coordinator is told, checked before any rule sees it: a group declared
(``GroupSpec``), a member's report (``Report``), and the errors that refuse one."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kappa_operator.coordinator.names import GroupName, MemberId, WatermarkUs

MAX_COUNT = 2**63 - 1


class CoordinatorError(Exception):
    """Base of the errors a report or a look-up can raise (the service maps them to 4xx)."""


class UnknownGroupError(CoordinatorError, LookupError):
    pass


class UnknownMemberError(CoordinatorError, LookupError):
    pass


class WatermarkRegressionError(CoordinatorError, ValueError):
    pass


class GroupSpec(BaseModel):
    """An alignment group as declared (from the CRs, or by a local run)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    name: GroupName
    """``<namespace>.<group>`` from the operator (names.GROUP_RULE)."""
    members: tuple[MemberId, ...] = ()
    """Source ids (``job/sink/source``) that hold the group until they report."""
    max_drift_us: int = Field(gt=0)
    idle_timeout_us: int | None = Field(default=None, gt=0)
    """A member whose watermark has not advanced for this long stops holding the group.
    None (the default) never: a slow or quiet member holds the group forever, which is safe."""
    self_register: bool = False
    """Accept reports from undeclared members, adding them on first report (local runs)."""

    @field_validator("members")
    @classmethod
    def _distinct_ids(cls, members: tuple[str, ...]) -> tuple[str, ...]:
        if dups := sorted({m for m in members if members.count(m) > 1}):
            raise ValueError(f"duplicate member ids: {dups}")
        return members

    @model_validator(mode="after")
    def _someone_to_wait_for(self) -> GroupSpec:
        if not self.members and not self.self_register:
            raise ValueError("members: must not be empty unless self_register (nobody could ever report)")
        return self


class Report(BaseModel):
    """A member's watermark, or that it finished (then ``watermark`` is None)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    member: MemberId
    watermark: WatermarkUs | None = None
    finished: bool = False
    reset: bool = False
    """A rewind: replace the member's state, so its watermark may go back."""
    read_bytes: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    """Cumulative bytes the member's admitted splits read (None: not reported, keep the last)."""
    read_files: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    """Cumulative file opens of the member's admitted splits; comes with ``read_bytes``."""

    @model_validator(mode="after")
    def _watermark_unless_finished(self) -> Report:
        if self.finished and self.watermark is not None:
            raise ValueError("watermark: must be None when finished (a finished member holds nobody)")
        if not self.finished and self.watermark is None:
            raise ValueError("watermark: required unless finished")
        if (self.read_bytes is None) != (self.read_files is None):
            raise ValueError("readBytes and readFiles: give both or neither")
        return self

    @classmethod
    def of(cls, member: str, watermark: int | None, reset: bool = False) -> Report:
        """From the ``WatermarkProvider`` convention, where None means finished."""
        return cls(member=member, watermark=watermark, finished=watermark is None, reset=reset)
