"""Terminal tables (rich) and the self-contained HTML report (hand-written SVG plots)."""
