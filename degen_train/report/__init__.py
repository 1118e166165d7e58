"""The sweep report: a table of runs (pandas), seed means ± std, figures, and the page that shows them."""
