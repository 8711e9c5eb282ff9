"""Documented data-TLB geometries by CPU vendor, family and model (issue 18, item 1).

``tlbsim calibrate`` measures the TLB knees; this table is what the vendors document for
4 KiB-page loads, so a measurement that disagrees with it is flagged instead of either
being trusted silently, and ``tlbsim validate`` has something the fit did not use to
check the knees against. A CPU not in the table has no documented reference ("unknown"):
nothing is guessed.

Sources (each row names its own):

* Intel: *Intel 64 and IA-32 Architectures Optimization Reference Manual*, the TLB table
  of each microarchitecture's chapter (Haswell, Skylake, Sunny Cove, Golden Cove); family 6
  model numbers from the *Intel SDM* vol. 4, Table 2-1.
* AMD: the *Software Optimization Guide* of each family (17h, 19h, 1Ah), which the CPUID
  leaves Fn8000_0005 / Fn8000_0006 also report on bare metal (a hypervisor may zero them,
  as the Intel guests of this workplace zero leaf 0x18). Zen 3 was checked here against
  CPUID Fn8000_0005/6 of an EPYC 7xx3 KVM guest (64 entries, fully associative; 2,048).

``ways = 0`` means fully associative.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Geometry:
    microarchitecture: str
    l1_entries: int  # first-level DTLB, 4 KiB pages, loads
    l1_ways: int  # 0: fully associative
    l2_entries: int  # second-level (shared / STLB) TLB entries usable by 4 KiB pages
    l2_ways: int
    source: str


_INTEL_OPT = "Intel 64 and IA-32 Architectures Optimization Reference Manual"
_HASWELL = Geometry("Haswell/Broadwell", 64, 4, 1024, 8, f"{_INTEL_OPT}, Haswell: DTLB 64 x 4-way, STLB 1024 x 8-way")
_SKYLAKE = Geometry(
    "Skylake (incl. Skylake-SP, Cascade Lake)",
    64,
    4,
    1536,
    12,
    f"{_INTEL_OPT}, Skylake: DTLB 64 x 4-way, STLB 1536 x 12-way",
)
_SUNNY = Geometry(
    "Sunny Cove / Willow Cove (incl. Ice Lake-SP)",
    64,
    4,
    2048,
    16,
    f"{_INTEL_OPT}, Sunny Cove: DTLB loads 64 x 4-way, STLB 2048 x 16-way (4 KiB and 2 MiB)",
)
_GOLDEN = Geometry(
    "Golden Cove / Raptor Cove (incl. Sapphire Rapids)",
    96,
    6,
    2048,
    16,
    f"{_INTEL_OPT}, Golden Cove: DTLB loads 96 x 6-way, STLB 2048 x 16-way",
)
_ZEN1 = Geometry(
    "Zen / Zen+",
    64,
    0,
    1536,
    6,
    "AMD Software Optimization Guide for family 17h: L1 DTLB 64 fully associative, L2 DTLB 1536 x 6-way",
)
_ZEN2 = Geometry(
    "Zen 2",
    64,
    0,
    2048,
    16,
    "AMD Software Optimization Guide for family 17h models 30h+: L1 DTLB 64 fully associative, L2 DTLB 2048 x 16-way",
)
_ZEN3 = Geometry(
    "Zen 3",
    64,
    0,
    2048,
    8,
    "AMD Software Optimization Guide for family 19h: L1 DTLB 64 fully "
    "associative, L2 DTLB 2048 (CPUID Fn8000_0006 reports 8-way)",
)
_ZEN4 = Geometry(
    "Zen 4",
    72,
    0,
    3072,
    24,
    "AMD Software Optimization Guide for family 19h models 10h+: L1 DTLB 72 fully associative, L2 DTLB 3072",
)
_ZEN5 = Geometry(
    "Zen 5",
    96,
    0,
    4096,
    16,
    "AMD Software Optimization Guide for family 1Ah: L1 DTLB 96 fully associative, L2 DTLB 4096",
)


def _models(*spans: tuple[int, int] | int) -> frozenset[int]:
    out: set[int] = set()
    for s in spans:
        if isinstance(s, tuple):
            out.update(range(s[0], s[1] + 1))
        else:
            out.add(s)
    return frozenset(out)


# (vendor_id, family, models, geometry); family as /proc/cpuinfo "cpu family" (extended
# family already added), model as "model" (extended model included).
TABLE: tuple[tuple[str, int, frozenset[int], Geometry], ...] = (
    ("GenuineIntel", 6, _models(0x3C, 0x3F, 0x45, 0x46, 0x3D, 0x47, 0x4F, 0x56), _HASWELL),
    ("GenuineIntel", 6, _models(0x4E, 0x5E, 0x55, 0x8E, 0x9E, 0xA5, 0xA6), _SKYLAKE),
    ("GenuineIntel", 6, _models(0x6A, 0x6C, 0x7D, 0x7E, 0x8C, 0x8D, 0xA7), _SUNNY),
    ("GenuineIntel", 6, _models(0x8F, 0xCF, 0x97, 0x9A, 0xB7, 0xBA, 0xBF), _GOLDEN),
    ("AuthenticAMD", 0x17, _models((0x00, 0x2F)), _ZEN1),
    ("AuthenticAMD", 0x17, _models((0x30, 0xFF)), _ZEN2),
    ("AuthenticAMD", 0x19, _models((0x00, 0x0F), (0x20, 0x2F), (0x40, 0x5F)), _ZEN3),
    ("AuthenticAMD", 0x19, _models((0x10, 0x1F), (0x60, 0x7F), (0xA0, 0xAF)), _ZEN4),
    ("AuthenticAMD", 0x1A, _models((0x00, 0xFF)), _ZEN5),
)


# Intel's generations in order, and flags that only a later one has: a KVM guest's CPU
# model may report another part's model number (a guest of this workplace reports 0xA7,
# Rocket Lake, with Sapphire Rapids' AMX), so a number that names a generation older than
# the flags allow is the hypervisor's, not the CPU's. AMX (amx_tile) first shipped with
# Sapphire Rapids, Golden Cove (Intel's Architecture Instruction Set Extensions reference).
_INTEL_ORDER = (_HASWELL, _SKYLAKE, _SUNNY, _GOLDEN)
_INTEL_AT_LEAST = (("amx_tile", _GOLDEN),)
# The flags the host description keeps (measure.Host.cpu_flags).
FLAGS_READ = frozenset(flag for flag, _ in _INTEL_AT_LEAST)


def lookup(vendor: str, family: int | None, model: int | None, flags: Sequence[str] = ()) -> Geometry | None:
    """The documented geometry of this CPU, or None when the table does not know it.
    ``flags``: /proc/cpuinfo's; an Intel model number older than its flags allow gives the
    geometry of the first generation with them."""
    if family is None or model is None:
        return None
    found = next((g for v, f, models, g in TABLE if v == vendor and f == family and model in models), None)
    if vendor == "GenuineIntel" and found in _INTEL_ORDER:
        for flag, first in _INTEL_AT_LEAST:
            if flag in flags and _INTEL_ORDER.index(found) < _INTEL_ORDER.index(first):
                note = f"model {model:#x} names {found.microarchitecture}, but the {flag} flag came with {first.microarchitecture}"
                return replace(first, microarchitecture=f"{first.microarchitecture}; {note}")
    return found


def documented_entries(g: Geometry, level: str) -> int:
    return g.l1_entries if level == "l1" else g.l2_entries


def agreement(measured: float, documented: int, tolerance: float = 0.15) -> tuple[bool, str]:
    """Whether a measured knee agrees with a documented size (within ``tolerance``), and a
    phrase saying so."""
    rel = measured / documented - 1
    ok = abs(rel) <= tolerance
    return ok, (
        f"agrees with the documented {documented} ({rel:+.0%})"
        if ok
        else f"DISAGREES with the documented {documented} ({rel:+.0%}, beyond {tolerance:.0%})"
    )
