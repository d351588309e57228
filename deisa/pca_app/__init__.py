"""The built-in analytics of ``deisa-run``: a PCA of every published step, and its report.

An application of the library (:class:`deisa.Adapter`, :class:`deisa.IncrementalPCA`), run by
the launcher (``deisa-run``, ``deisa-run analytics``); it imports the analysis side and the
shared protocol, never the launcher. Modules, each importing only those before it:

- :mod:`~deisa.pca_app.failures`: :class:`~deisa.pca_app.failures.PipelineError` and the end
  of a log (the launcher raises and shows them too);
- :mod:`~deisa.pca_app.stall`: when the wait for a step ends (a slow simulation is not a stuck
  one);
- :mod:`~deisa.pca_app.pipeline`: :func:`~deisa.pca_app.pipeline.analyze_stream`, the fits of
  every step with its keyword-only :class:`~deisa.pca_app.pipeline.PCASettings`;
- :mod:`~deisa.pca_app.report`: the per-step table, the plot and ``results.json``;
- :mod:`~deisa.pca_app.driver`: the one driver, from the warm-up to the report.

Runs in the analytics' process that ``deisa-run`` starts (its main thread; the fits on the Dask
workers); imports :mod:`deisa.analysis` only.
"""
