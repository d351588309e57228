# Spack recipe of deisa-insitu (pyproject.toml; tests/test_packaging.py checks that its
# dependencies and versions are pyproject.toml's). No release is published yet: install a
# checkout, in an active Spack environment,
#
#   spack repo add packaging/spack
#   spack develop --path "$PWD" py-deisa-insitu@0.1.0
#   spack add py-deisa-insitu@0.1.0 +plugin +adios2 && spack install
#
# then `python -m deisa doctor` says what it found. Once published, give `pypi` (or `git`) and
# each version's sha256 here.
#
# ruff: noqa: F403, F405, SIM105

try:  # Spack >= 1.0: the build systems live in the builtin package repository
    from spack_repo.builtin.build_systems.python import PythonPackage
except ImportError:  # older Spack: spack.package exports them
    pass

from spack.package import *


class PyDeisaInsitu(PythonPackage):
    """In situ analytics of MPI simulations with Dask: a Bridge per MPI rank publishes its
    blocks to Dask workers, an Adapter rebuilds them as global dask arrays step after step; a
    PDI plugin (+plugin) takes a C or Fortran code in situ by swapping one YAML section, and
    deisa-run (+launcher) runs a simulation, Dask and the analytics together, under Slurm too."""

    version("0.1.0")

    variant("plugin", default=False, description="Build the deisa PDI plugin (C++, CMake)")
    variant("adios2", default=False, description="Build the deisa ADIOS2 engine (C++, CMake)")
    variant("launcher", default=True, description="deisa-run: plot, progress, dashboard, TLS")
    variant("posthoc", default=False, description="deisa.Replay of HDF5 files (h5py)")
    variant("zarr", default=False, description="deisa.Replay of Zarr stores")
    variant("xarray", default=False, description="Labelled arrays (items(as_xarray=True))")
    variant("core", default=False, description="deisa.insitu: the deisa-core interface")
    # No variant for pyproject.toml's `ucx` extra (deisa-run --protocol ucx): Spack has no package
    # of distributed-ucxx, a RAPIDS wheel; `pip install distributed-ucxx-cu12` in the environment.
    # Nor for the `adios2` extra (PyPI's serial adios2 wheel: deisa.Replay of .bp output): Spack
    # has no py-adios2; its adios2 package built +python provides the module.

    # [build-system] requires and requires-python
    depends_on("py-setuptools@68:", type="build")
    depends_on("python@3.10:", type=("build", "run"))

    # [project] dependencies
    depends_on("py-numpy@1.24:", type=("build", "run"))
    depends_on("py-dask@2025.1: +array", type=("build", "run"))
    depends_on("py-distributed@2025.1:", type=("build", "run"))
    depends_on("py-mpi4py@3.1:", type=("build", "run"))
    depends_on("py-pyyaml@6:", type=("build", "run"))
    depends_on("py-scikit-learn@1.3:", type=("build", "run"))
    depends_on("py-scipy@1.10:", type=("build", "run"))

    # [project.optional-dependencies], one variant each (but the test suite's)
    depends_on("py-matplotlib@3.7:", type=("build", "run"), when="+launcher")
    depends_on("py-tqdm@4.60:", type=("build", "run"), when="+launcher")
    depends_on("py-bokeh@3.1:", type=("build", "run"), when="+launcher")
    depends_on("py-psutil@5.9:", type=("build", "run"), when="+launcher")
    depends_on("py-cryptography@41:", type=("build", "run"), when="+launcher")
    depends_on("py-h5py@3.8:", type=("build", "run"), when="+posthoc")
    depends_on("py-zarr@3:", type=("build", "run"), when="+zarr")
    depends_on("py-xarray@2024.6:", type=("build", "run"), when="+xarray")
    depends_on("py-deisa-core@0.6:", type=("build", "run"), when="+core")

    # +plugin: CMake builds plugin/pdi/ against PDI, MPI and this Python, which the plugin embeds
    depends_on("pdi@1.12: +python", type=("build", "link", "run"), when="+plugin")
    depends_on("paraconf@1:", type=("build", "link"), when="+plugin")
    depends_on("pdiplugin-mpi@1.12:", type="run", when="+plugin")  # configs/*.yml load it
    depends_on("mpi", type=("build", "link", "run"), when="+plugin")
    depends_on("python@3.10:", type=("build", "link", "run"), when="+plugin")
    depends_on("py-pybind11@2.9:", type="build", when="+plugin")
    depends_on("cmake@3.22:", type="build", when="+plugin")
    depends_on("c", type="build", when="+plugin")
    depends_on("cxx", type="build", when="+plugin")

    # +adios2: CMake builds plugin/adios2 against ADIOS2 with MPI and this Python, embedded too
    depends_on("adios2@2.12: +mpi", type=("build", "link", "run"), when="+adios2")
    depends_on("mpi", type=("build", "link", "run"), when="+adios2")
    depends_on("python@3.10:", type=("build", "link", "run"), when="+adios2")
    depends_on("py-pybind11@2.9:", type="build", when="+adios2")
    depends_on("cmake@3.22:", type="build", when="+adios2")
    depends_on("c", type="build", when="+adios2")
    depends_on("cxx", type="build", when="+adios2")

    @property
    def import_modules(self):
        modules = ["deisa", "deisa.bridge", "deisa.scheduler", "deisa.analysis", "deisa.doctor"]
        if self.spec.satisfies("+launcher"):
            modules.append("deisa.launcher")
        return modules

    @property
    def plugin_dir(self):
        """Where +plugin installs libpdi_deisa_plugin.so: this prefix's lib/, on the
        PDI_PLUGIN_PATH of every environment that loads this package."""
        return self.prefix.lib

    @run_after("install")
    def install_plugin(self):
        """+plugin, +adios2: configure the project, build the PDI plugin's and the ADIOS2
        engine's targets and install their components (`cmake --install build --component
        deisa_plugin` and `deisa_adios2_engine`, README) into plugin_dir."""
        components = [
            (target, component)
            for variant, target, component in (
                ("+plugin", "pdi_deisa_plugin", "deisa_plugin"),
                ("+adios2", "deisa_adios2_engine", "deisa_adios2_engine"),
            )
            if self.spec.satisfies(variant)
        ]
        if not components:
            return
        cmake = self.spec["cmake"].command
        build = join_path(self.stage.path, "spack-build-plugin")
        cmake(
            "-S",
            self.stage.source_path,
            "-B",
            build,
            "-DCMAKE_BUILD_TYPE=Release",
            f"-DPython3_EXECUTABLE={self.spec['python'].command.path}",
            f"-DINSTALL_PDIPLUGINDIR={self.plugin_dir}",
            f"-DINSTALL_ADIOS2PLUGINDIR={self.plugin_dir}",
        )
        for target, component in components:
            cmake("--build", build, "--target", target, "--parallel", str(make_jobs))
            cmake("--install", build, "--component", component)

    def setup_run_environment(self, env):
        if self.spec.satisfies("+plugin"):
            env.prepend_path("PDI_PLUGIN_PATH", self.plugin_dir)
        if self.spec.satisfies("+adios2"):
            env.prepend_path("ADIOS2_PLUGIN_PATH", self.plugin_dir)
