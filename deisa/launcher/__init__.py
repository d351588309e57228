"""The launcher ``deisa-run``, beside the library: it runs a simulation and its analytics.

Modules, each importing only those before it; the built-in PCA it runs is a package of its
own, :mod:`deisa.pca_app`:

- :mod:`~deisa.launcher.defaults`: the defaults file ``deisa/templates/defaults.yml`` (dask
  configuration: ``deisa.run``, ``deisa.mpi``, ``deisa.slurm``), its overrides and its
  comments (the options' help);
- :mod:`~deisa.launcher.security`: a job's TLS credentials and its private files;
- :mod:`~deisa.launcher.private_tmp`: the run's private temporary directory, where every process
  it starts keeps its scratch;
- :mod:`~deisa.launcher.elf`, :mod:`~deisa.launcher.libraries`: the RPATH/RUNPATH of an ELF
  library, and what the loaders are handed checked against other accounts (the directories
  they search by name, every name tried there, the plugin paths and ``LD_PRELOAD``);
- :mod:`~deisa.launcher.checks`: the check of each option's value;
- :mod:`~deisa.launcher.options`: the one declaration of every option (flags, defaults key,
  check) and the parsers built from it;
- :mod:`~deisa.launcher.settings`: the frozen settings of a run
  (:class:`~deisa.launcher.settings.RunSettings`) and of the analytics client;
- :mod:`~deisa.launcher.solver`, :mod:`~deisa.launcher.ucx`,
  :mod:`~deisa.launcher.adios2_engine`: services the settings ask (can the C solver run here,
  its PDI YAML, the deisa PDI plugin; can the run speak UCX; where the deisa ADIOS2 engine is,
  for a user's ADIOS2 code);
- :mod:`~deisa.launcher.parse`: the one pass from the command line, the defaults and the config
  file to settings, every value checked once (the Bridge's options and the launcher's counts
  with the constraints of :mod:`deisa.bridge.options`);
- :mod:`~deisa.launcher.processes`: child processes, their environment, signals;
- :mod:`~deisa.launcher.guardian`: the process that stops a local run's processes and removes
  its files if ``deisa-run`` dies without doing so (SIGKILL);
- :mod:`~deisa.launcher.dask_processes`: the ``dask scheduler`` and ``dask worker`` command
  lines, started and stopped (for the launcher, the tests and the benchmarks);
- :mod:`~deisa.launcher.commands`: the simulation's command by solver, a user's command and
  analytics;
- :mod:`~deisa.launcher.slurm_layout`: which node of a Slurm allocation runs what;
- :mod:`~deisa.launcher.plan`: the settings made into one plan, every process (name, command,
  environment, nodes, tasks, cores), the files written first and what the back ends need of
  the run (output, timeouts, TLS or UCX, the built-in PCA, a job's allocation), for both
  launches;
- :mod:`~deisa.launcher.local`: a local run's plan started on this machine;
- :mod:`~deisa.launcher.slurm`: a job's plan rendered into one batch script;
- :mod:`~deisa.launcher.cli`: the commands of ``deisa-run``, their messages and exit status
  (``python -m deisa.launcher``: its ``__main__``).

Runs in the ``deisa-run`` process (and the job script it writes); it may import any side of
deisa, and no side imports it.

The library (:class:`deisa.Bridge`, :class:`deisa.Adapter`, the splitter, the PCA) never imports
this package, nor its plotting and progress-bar dependencies (the ``launcher`` extra).
"""
