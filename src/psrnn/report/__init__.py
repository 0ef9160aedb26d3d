"""The shared reporting toolkit every study's compile uses: reading finished runs
(collect), statistics (stats), number formats (fmt), learning curves (curves), tables and
their writers (tables), figures saved byte-stable (figures), and the REPORT sections every
study writes alike (provenance). It imports no study: a study's results module builds on it
(the first study's psrnn.studies.private_shared.results, the second's
psrnn.studies.relreg.results).
"""

TABLE_FORMATS = ("csv", "md", "tex")  # what a table is written as
FIGURE_FORMATS = ("pdf", "png", "svg")  # what a figure is saved as
