"""The preset table: what each ``preset`` scores, which block decides the clip's status, and the
config values it sets.

A preset is one :class:`Preset` entry of :data:`PRESETS`; the pipeline runs its ``sections`` in
order (``geocon_torch.pipeline.SECTION_STEPS`` maps each name to its step), the clip's status is
that of its ``status_from`` block, ``GeoConConfig.with_preset(name)`` applies its ``overrides``
and records the name in ``config.preset`` (so it is part of ``config_hash``), and a reward
``kind`` (``geocon_torch.rewards``, ``geocon_torch.bench.preferences``) is scored with the preset
whose ``reward_kind`` it is. Adding a preset is one entry here (plus a step in the pipeline when
it needs a new section).

>>> PRESETS["background"].sections, PRESETS["background"].status_from
(('background',), 'background')
>>> preset_for_kind("epipolar").name
'worldatlas'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Tuple

from .errors import InputError

#: every section a preset may run, in the order the pipeline runs them (result block names;
#: ``epipolar_gvgc`` fills ``extra["epipolar_gvgc"]``)
SECTION_NAMES = ("background", "foreground", "epipolar", "epipolar_gvgc", "epipolar_dpo")
#: the blocks a status can be read from
STATUS_BLOCKS = ("background", "epipolar", "epipolar_dpo")
#: the protocols of the ``epipolar`` block
EPIPOLAR_PROTOCOLS = ("worldatlas", "gvgc")


@dataclass(frozen=True)
class Preset:
    """One row of the preset table.

    Attributes:
        name: the ``config.preset`` / ``--preset`` value.
        summary: one line for the README table and ``--help``.
        sections: the sections it runs (names of :data:`SECTION_NAMES`, in that order).
        status_from: the block whose ``status`` / ``reason`` become the clip's.
        epipolar_protocol: the protocol of its ``epipolar`` block ("worldatlas" | "gvgc").
        reward_kind: the ``geometric_reward`` kind that is scored with this preset (None: none).
        overrides: config values it sets, as ``GeoConConfig.replace`` takes them (section ->
            {field: value}); applied by ``GeoConConfig.with_preset``.
    """

    name: str
    summary: str
    sections: Tuple[str, ...]
    status_from: str
    epipolar_protocol: Optional[str] = None
    reward_kind: Optional[str] = None
    overrides: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [s for s in self.sections if s not in SECTION_NAMES]
        order = [s for s in SECTION_NAMES if s in self.sections]
        if unknown or order != list(self.sections):
            raise InputError(f"preset {self.name!r}: sections must be among {SECTION_NAMES} in "
                             f"that order, got {self.sections}")
        if self.status_from not in STATUS_BLOCKS or self.status_from not in self.sections:
            raise InputError(f"preset {self.name!r}: status_from must be one of its sections "
                             f"among {STATUS_BLOCKS}, got {self.status_from!r}")
        if ("epipolar" in self.sections) != (self.epipolar_protocol in EPIPOLAR_PROTOCOLS):
            raise InputError(f"preset {self.name!r}: an epipolar section needs an "
                             f"epipolar_protocol in {EPIPOLAR_PROTOCOLS} (and only then)")


def _table(*presets: Preset) -> Dict[str, Preset]:
    return {p.name: p for p in presets}


#: the preset table (the first entry is the default ``config.preset``)
PRESETS: Dict[str, Preset] = _table(
    Preset("geocon", "background IR / GE + AdaDFRC-W2 of moving objects (GeoCon-Bench)",
           ("background", "foreground"), "background"),
    Preset("background", "background IR / GE only (the fastest)", ("background",),
           "background", reward_kind="background"),
    Preset("worldatlas", "the WorldAtlas epipolar trio only", ("epipolar",), "epipolar",
           epipolar_protocol="worldatlas", reward_kind="epipolar"),
    Preset("gvgc", "the original GVGC protocol (Li et al. 2024) only", ("epipolar",),
           "epipolar", epipolar_protocol="gvgc"),
    Preset("epipolar-dpo", "the Epipolar-DPO protocol (Kupyn et al. 2025) only, at source "
           "resolution", ("epipolar_dpo",), "epipolar_dpo", reward_kind="epipolar-dpo"),
    Preset("all", "background + foreground + WorldAtlas trio (+ GVGC in extra)",
           ("background", "foreground", "epipolar", "epipolar_gvgc"), "background",
           epipolar_protocol="worldatlas"),
)
#: preset names, table order
PRESET_NAMES: Tuple[str, ...] = tuple(PRESETS)
#: reward kinds, table order (each scored with the preset naming it as ``reward_kind``)
REWARD_KINDS: Tuple[str, ...] = tuple(p.reward_kind for p in PRESETS.values() if p.reward_kind)


def get_preset(name: str) -> Preset:
    """The table entry of ``name`` (InputError naming the choices otherwise)."""
    if name not in PRESETS:
        raise InputError(f"preset must be one of {', '.join(map(repr, PRESETS))}, got {name!r}")
    return PRESETS[name]


def preset_for_kind(kind: str) -> Preset:
    """The preset a reward ``kind`` is scored with (InputError for an unknown kind)."""
    for p in PRESETS.values():
        if p.reward_kind == kind:
            return p
    raise InputError(f"reward kind must be one of {REWARD_KINDS}, got {kind!r}")


def preset_table() -> str:
    """The table as Markdown (the README's preset table is this text)."""
    rows = ["| preset | sections | status from | reward kind | config overrides | what it scores |",
            "|---|---|---|---|---|---|"]
    for p in PRESETS.values():
        secs = ", ".join(f"`{s}`" + (f" ({p.epipolar_protocol})" if s == "epipolar" else "")
                         for s in p.sections)
        over = ", ".join(f"`{k}={v}`" for k, v in sorted(p.overrides.items())) or "-"
        rows.append(f"| `{p.name}` | {secs} | `{p.status_from}` | "
                    f"{'`' + p.reward_kind + '`' if p.reward_kind else '-'} | {over} | "
                    f"{p.summary} |")
    return "\n".join(rows)
