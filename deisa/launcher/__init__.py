"""The launcher ``deisa-run``, beside the library: it runs a simulation and its analytics.

Modules, each importing only those before it:

- :mod:`~deisa.launcher.config`: the defaults file, the one declaration of every option (its
  help taken from ``deisa/templates/defaults.yml``), settings and their checks;
- :mod:`~deisa.launcher.solver`: which solver runs, and the one command line that runs it;
- :mod:`~deisa.launcher.processes`: child processes, their environment, signals;
- :mod:`~deisa.launcher.report`: the per-step table, the plot and ``results.json``;
- :mod:`~deisa.launcher.local`: the whole pipeline on this machine;
- :mod:`~deisa.launcher.slurm`: the same in one Slurm allocation, as a batch script;
- :mod:`~deisa.launcher.cli`: the parsers and the commands of ``deisa-run``.

The library (:class:`deisa.Bridge`, :class:`deisa.Adapter`, the splitter, the PCA) never imports
this package, nor its plotting and progress-bar dependencies (the ``launcher`` extra).
"""
