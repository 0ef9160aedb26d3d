"""The shared reporting toolkit every study's compile uses: reading finished runs
(collect), statistics (stats), number formats (fmt), learning curves (curves), tables and
their writers (tables), figures saved byte-stable (figures), and the REPORT sections every
study writes alike (provenance). It imports no study: a study's results module builds on it
(the first study's psrnn.studies.private_shared.results, the second's
psrnn.studies.relreg.results).
"""

TABLE_FORMATS = ("csv", "md", "tex")  # what a table is written as
FIGURE_FORMATS = ("pdf", "png", "svg")  # what a figure is saved as
FOREST = "verdicts_forest"  # the stem of every study's forest plot of its verdicts (psrnn.report.forest)


def forest_drawn(cfg: dict) -> bool:
    """Whether compile draws the forest plot of a suite's verdicts: where the config holds
    its numbers against the paper's (paper-scale, or a reduced-scale check that names itself
    in `scale_label`) over more than one seed. A small config compares nothing and one seed
    gives no interval, so neither has a plot (nor a file for it)."""
    return (bool(cfg.get("paper_scale")) or "scale_label" in cfg) and len(cfg.get("seeds", [])) > 1
