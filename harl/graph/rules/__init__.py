"""Every graph rule harl has, by name."""

from __future__ import annotations

from harl.graph.rule import Rule
from harl.graph.rules.conv import FoldScaleConv, MergeParallelConv
from harl.graph.rules.layout import ConvertLayoutNHWC, ConvToNHWC
from harl.graph.rules.matmul import FoldScaleMatmul, HoistScale, MergeParallelMatmul
from harl.graph.rules.shape import (
    CancelReshapePair,
    CancelSplitConcat,
    CancelTransposePair,
    FuseTransposeMatmul,
)
from harl.graph.rules.sums import ExpandMatmulOfSum, FactorMatmulOfSum

ALL_RULES: tuple[Rule, ...] = (
    MergeParallelMatmul(),
    FoldScaleMatmul(),
    HoistScale(),
    MergeParallelConv(),
    FoldScaleConv(),
    FuseTransposeMatmul(),
    CancelTransposePair(),
    CancelReshapePair(),
    CancelSplitConcat(),
    FactorMatmulOfSum(),
    ExpandMatmulOfSum(),
    ConvToNHWC(),
    ConvertLayoutNHWC(),
)
"""one instance of each rule, in a fixed order (a search's action space)"""

LAYOUT_RULES = frozenset({ConvToNHWC.name, ConvertLayoutNHWC.name})
"""rules that choose a conv's layout: left out where the blocked layout pass places every conv
(an NHWC conv among blocked ones only adds transposes around it)"""


def search_rules(*, blocked_convs: bool) -> tuple[Rule, ...]:
    """The rules a graph search applies: all of them, less LAYOUT_RULES with `blocked_convs`."""
    return tuple(rule for rule in ALL_RULES
                 if not (blocked_convs and rule.name in LAYOUT_RULES))


def rule_by_name(name: str) -> Rule:
    """The rule called `name`; a KeyError lists the known names."""
    for rule in ALL_RULES:
        if rule.name == name:
            return rule
    raise KeyError(f"no graph rule {name!r}; known: {', '.join(r.name for r in ALL_RULES)}")
