"""The demo's training (examples/train_digits.py): its command line, its environment, and its pace on
this machine, measured before the demo sizes its run.

Machines differ by a factor of four or more (20 to 90 steps/s have been seen), so a fixed number of
steps either trains in one job on a fast machine, with no handover to show, or takes far too long on a
slow one. The demo trains for a few seconds without checkpoints, counts the loss log's lines, and sizes
the run to a training time instead.
"""

import os
import signal
import subprocess
import time

WARM_UP_STEPS = 50  # the first steps also pay for the data loader's start
WINDOW_S = 4.0
START_TIMEOUT_S = 120  # importing torch on a loaded machine


BATCH_SIZE = 128


class PaceError(Exception):
    pass


def command(app, steps, loss_log, *extra):
    """train_digits.py without checkpoints (the reference, the pace); `app` holds the staged copy."""
    return ["/usr/bin/python3", f"{app}/train_digits.py", "--no-checkpoint", "--steps", str(steps),
            "--batch-size", str(BATCH_SIZE), "--loss-log", loss_log, *extra]


def user_env(home, pythonpath):
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": home}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return env


def lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def measure_pace(argv, env, loss_log, output):
    """Steps per second of `argv`, a training that appends one line per step to `loss_log`."""
    with open(output, "wb") as out:
        training = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while lines(loss_log) < WARM_UP_STEPS:
            if training.poll() is not None:
                with open(output, errors="replace") as f:
                    raise PaceError(f"the training exited with {training.returncode}:\n{f.read()[-2000:]}")
            if time.monotonic() > deadline:
                raise PaceError(f"the training did not reach step {WARM_UP_STEPS} in {START_TIMEOUT_S} s")
            time.sleep(0.1)
        start, first = time.monotonic(), lines(loss_log)
        time.sleep(WINDOW_S)
        end, last = time.monotonic(), lines(loss_log)
        return (last - first) / (end - start)
    finally:
        if training.poll() is None:
            os.killpg(training.pid, signal.SIGKILL)
        training.wait()
