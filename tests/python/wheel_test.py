#!/usr/bin/python3
"""The checkpointer as a researcher installs it into an environment of their own, offline:

1. a fresh venv that sees the system's packages (its PyTorch), `pip install --no-build-isolation
   --no-index` of the source tree (pyproject.toml: the checkpointer alone, through meson-python);
2. the installed package is the one imported (not the build directory's), its module needs no
   libbaton-ckpt beside it and no run-time path, and the Python tests pass against it, run from outside
   the source tree;
3. `python -m build --no-isolation` makes an sdist and a wheel from it, and the wheel installs into a
   second venv that has no PyTorch, where `baton` imports and checkpoints, and `baton.torch` says it
   needs torch (left out with --no-dist, or where the source tree is no git checkout).

Prints the build times and the wheel's size. Exit status: 0 passed, 1 failed, 77 skipped (no pip,
venv or meson-python for this interpreter)."""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The Python tests run again against the installed package (each exits 77 where torch or numpy is
# missing).
SUITES = ["binding_test.py", "torch_binding_test.py", "resume_exact_test.py"]


def run(command, *, cwd, env=None, timeout=900):
    print("+ " + " ".join(command), flush=True)
    started = time.monotonic()
    result = subprocess.run(command, cwd=cwd, env=env, timeout=timeout, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    elapsed = time.monotonic() - started
    if result.returncode not in (0, 77):
        print(result.stdout[-6000:], flush=True)
        raise SystemExit(f"FAIL: {' '.join(command)} exited {result.returncode}")
    return result, elapsed


def clean_env():
    """The environment of a user's shell: nothing pointing at the build directory."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env["PIP_NO_INDEX"] = "1"  # offline, as a site without a package index builds it
    return env


def make_venv(path, system_site):
    command = [sys.executable, "-m", "venv", path]
    if system_site:
        command.insert(3, "--system-site-packages")
    subprocess.run(command, check=True)
    return os.path.join(path, "bin", "python")


def check_installed(python, venv, work):
    """The import resolves to the venv's package, whose module stands alone."""
    probe = ("import baton, baton._native as n, os; print(os.path.realpath(baton.__file__)); "
             "print(os.path.realpath(n.__file__))")
    result, _ = run([python, "-c", probe], cwd=work, env=clean_env())
    package, native = result.stdout.split()
    prefix = os.path.realpath(venv) + os.sep
    if not package.startswith(prefix) or not native.startswith(prefix):
        raise SystemExit(f"FAIL: baton was imported from {package} ({native}), not from the venv {venv}")
    dynamic = subprocess.run(["readelf", "-d", native], capture_output=True, text=True, check=True).stdout
    if "libbaton-ckpt" in dynamic or "RPATH" in dynamic or "RUNPATH" in dynamic:
        raise SystemExit(f"FAIL: {native} needs a library beside it or a run-time path:\n{dynamic}")
    return native


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="the source tree (holds pyproject.toml)")
    parser.add_argument("--no-dist", action="store_true", help="leave out the sdist and wheel of part 3")
    args = parser.parse_args()
    source = os.path.abspath(args.source)
    try:
        import mesonpy  # noqa: F401  (the build backend, for --no-build-isolation)
        import venv  # noqa: F401
        subprocess.run([sys.executable, "-m", "pip", "--version"], check=True, capture_output=True)
    except (ImportError, subprocess.CalledProcessError) as missing:
        print(f"skipped: {missing}", flush=True)
        return 77

    work = tempfile.mkdtemp(prefix="baton-wheel-test-")
    try:
        venv1 = os.path.join(work, "venv")
        python = make_venv(venv1, system_site=True)
        _, seconds = run([python, "-m", "pip", "install", "--no-build-isolation", source], cwd=work,
                         env=clean_env())
        print(f"pip install --no-build-isolation of the source tree: {seconds:.0f} s", flush=True)
        native = check_installed(python, venv1, work)
        print(f"installed module {native}: {os.path.getsize(native) / 1e6:.1f} MB", flush=True)
        ran = []
        for suite in SUITES:
            result, seconds = run([python, os.path.join(HERE, suite)], cwd=work, env=clean_env())
            outcome = "skipped (77)" if result.returncode == 77 else "passed"
            ran.append(f"{suite} {outcome} in {seconds:.0f} s")
        print("against the installed package: " + "; ".join(ran), flush=True)

        # An sdist is `meson dist`, which packs a git checkout's committed files.
        checkout = subprocess.run(["git", "-C", source, "rev-parse", "--git-dir"], capture_output=True).returncode == 0
        if not checkout and not args.no_dist:
            print("python -m build left out: the source tree is no git checkout (an sdist packs one)", flush=True)
        if checkout and not args.no_dist:
            dist = os.path.join(work, "dist")
            # sdist first, then the wheel built from it (what `python -m build` does); -x: the build
            # requirements come from the system (pybind11 through pkg-config), not from an index.
            # Unoptimized and host-only: this wheel checks the packaging (the first build is the user's).
            _, seconds = run([sys.executable, "-m", "build", "--no-isolation", "-x", "--outdir", dist,
                              "-Csetup-args=-Doptimization=0", "-Csetup-args=-Dcuda=disabled", source],
                             cwd=work, env=clean_env())
            sdists = glob.glob(os.path.join(dist, "baton-*.tar.gz"))
            wheels = glob.glob(os.path.join(dist, "baton-*.whl"))
            if len(sdists) != 1 or len(wheels) != 1:
                raise SystemExit(f"FAIL: python -m build made {os.listdir(dist)}, not one sdist and one wheel")
            print(f"python -m build: {os.path.basename(sdists[0])} ({os.path.getsize(sdists[0]) / 1e6:.1f} MB), "
                  f"{os.path.basename(wheels[0])} ({os.path.getsize(wheels[0]) / 1e6:.1f} MB) in {seconds:.0f} s",
                  flush=True)
            # A venv without the system's packages: no torch there.
            venv2 = os.path.join(work, "bare")
            bare = make_venv(venv2, system_site=False)
            run([bare, "-m", "pip", "install", wheels[0]], cwd=work, env=clean_env())
            check_installed(bare, venv2, work)
            probe = """
import baton, tempfile
weights = bytearray(range(256)) * 64
with tempfile.TemporaryDirectory() as chain:
    options = baton.Options()
    options.chain_dir = chain
    ckpt = baton.Checkpointer(options)
    ckpt.register_region("weights", weights)
    assert ckpt.checkpoint_now(3)
    del ckpt
    restored = bytearray(len(weights))
    again = baton.Checkpointer(options)
    again.register_region("weights", restored)
    assert again.restore().iteration == 3
    assert restored == weights
try:
    import torch  # noqa: F401
    raise SystemExit("torch is importable in the bare venv")
except ImportError:
    pass
try:
    import baton.torch  # noqa: F401
    raise SystemExit("baton.torch imported without torch")
except ImportError as error:
    print("baton.torch without torch:", error)
print("the wheel works without torch")
"""
            result, _ = run([bare, "-c", probe], cwd=work, env=clean_env())
            print(result.stdout.strip(), flush=True)
        print("PASS", flush=True)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
