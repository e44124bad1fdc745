"""Free-surface schemes: the external (barotropic) mode of a core.

A scheme is the part pompy.core.model.Core is given. It has
``external_mode(s, p, routines) -> s``: from the state after the 3-D terms
of the external mode (vertical_averages), the new elevation and
depth-mean velocities (el, elb, ua, uab, va, vab, d) and what the
internal mode reads of them: egf (the step's mean elevation), etf (the
internal mode's new elevation) and utf, vtf (the transports the 3-D
velocities are adjusted to); plus ``vamax``, ``imax``, ``jmax`` of its
velocity check, and ``checked_field`` the field of the check. A scheme of several passes may
also give ``begin(s, p) -> s``, ``passes(p)`` (the kind of each pass) and
``step(s, p, routines, kind) -> s`` (one pass), which its external_mode
runs in turn, so that a compiled core (pompy.core.compiled) makes one graph
per run of pass kinds.

    split.SplitExplicit     pom2k's mode split: isplit explicit passes of dte
"""
