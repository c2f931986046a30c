"""Every graph rule harl has, by name."""

from __future__ import annotations

from harl.graph.rule import Rule
from harl.graph.rules.conv import FoldScaleConv, MergeParallelConv
from harl.graph.rules.hints import FenceFusion, HalveConvBlock, KeepConvNCHW
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

NODE_RULES: tuple[Rule, ...] = (KeepConvNCHW(), HalveConvBlock(), FenceFusion())
"""per-node decisions of the lowering (harl.graph.rules.hints): a conv's blocked layout and a
fusion fence; a search takes them where it is asked to (`search_rules`' `node_decisions`)"""

CONV_HINT_RULES = frozenset({KeepConvNCHW.name, HalveConvBlock.name})
"""node rules that only the blocked conv layout pass reads"""

LAYOUT_RULES = frozenset({ConvToNHWC.name, ConvertLayoutNHWC.name})
"""rules that choose a conv's layout: left out where the blocked layout pass places every conv
(an NHWC conv among blocked ones only adds transposes around it)"""


def search_rules(*, blocked_convs: bool, node_decisions: bool = False) -> tuple[Rule, ...]:
    """The rules a graph search applies: all of them, less LAYOUT_RULES with `blocked_convs`;
    with `node_decisions`, NODE_RULES after them (the conv hints only with `blocked_convs`)."""
    rules = tuple(rule for rule in ALL_RULES
                  if not (blocked_convs and rule.name in LAYOUT_RULES))
    if node_decisions:
        rules += tuple(rule for rule in NODE_RULES
                       if blocked_convs or rule.name not in CONV_HINT_RULES)
    return rules


def rule_by_name(name: str) -> Rule:
    """The rule called `name`; a KeyError lists the known names."""
    for rule in ALL_RULES + NODE_RULES:
        if rule.name == name:
            return rule
    raise KeyError(f"no graph rule {name!r}; known: "
                   f"{', '.join(r.name for r in ALL_RULES + NODE_RULES)}")
