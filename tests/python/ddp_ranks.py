"""The ranks of ddp_test.py and the launcher that forks them: one rank's training (DDP over gloo on the
digits example, checkpointed with baton.torch, its results written for the test to read), and the
zygote that imported everything a rank needs once and forks each rank on request."""

import ctypes
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback

import torch
import torch.distributed

# The zygote runs as this program with --zygote: it parses each rank's arguments with the test's parser.
TEST_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_test.py")


class Failure(Exception):
    pass


# --- one rank -----------------------------------------------------------------------------------------


def ordered_mean(state, bucket):
    tensor = bucket.buffer()
    gathered = [torch.empty_like(tensor) for _ in range(torch.distributed.get_world_size())]
    torch.distributed.all_gather(gathered, tensor)
    total = gathered[0].clone()
    for other in gathered[1:]:
        total += other
    future = torch.futures.Future()
    future.set_result(total / len(gathered))
    return future



def load_example(path):
    spec = importlib.util.spec_from_file_location("train_digits", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def torchrun_store():
    """A client of the store torchrun hosts for its ranks. env:// would make one too, but PyTorch 2.4 to
    2.6 make that client ask for libuv whatever USE_LIBUV says (torchrun_without_libuv.py tells why)."""
    from torchrun_without_libuv import store_options
    return torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                                      **store_options())


def slow_final_stage(ckpt, seconds):
    """Makes the job's final checkpoint (of a handover: batond's request in the chain directory, or of
    the deadline; not the one of the finished training) take `seconds` longer, as a large model's would: a sleep in the checkpointer's hook
    before the checkpoint starts, once. Returns what it notes of it."""
    stage, noted = ckpt._stage, {}

    def slowed(iteration):
        requested = os.path.exists(os.path.join(ckpt.chain_dir, ".baton-handover-request"))
        if not noted and ckpt._session.starting_final and not ckpt.training_done:
            noted.update(began_unix=time.time(), iteration=iteration, handover=requested)
            time.sleep(seconds)
        stage(iteration)
        if noted and "staged_unix" not in noted:
            noted["staged_unix"] = time.time()

    ckpt._stage = slowed
    return noted


def worker(args, example):
    import baton.torch
    from torch.nn.parallel import DistributedDataParallel
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    class RecordingSampler(baton.torch.ResumableSampler):
        """Notes (epoch, index) of every index handed out: the samples this rank trains on."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.drawn = []

        def __iter__(self):
            for index in super().__iter__():
                # The native sampler moves to the next epoch right after an epoch's last index.
                self.drawn.append((self.epoch if self.position > 0 else self.epoch - 1, index))
                yield index

    # PyTorch 2.4+ asks its TCP store for libuv, which Debian's build (2.6) lacks; 1.13 ignores this.
    os.environ.setdefault("USE_LIBUV", "0")
    if args.rank is None:  # started by torchrun, which names the rank and its peers in the environment
        args.rank, args.ranks = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        torch.distributed.init_process_group("gloo", store=torchrun_store(), rank=args.rank, world_size=args.ranks)
    else:
        torch.distributed.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.port}",
                                             rank=args.rank, world_size=args.ranks)
    example.make_deterministic(args.seed)
    train_set, _ = example.load_data(args.seed)
    model = DistributedDataParallel(example.DigitsNet())
    if args.ranks > 2:
        # DDP regroups its gradient buckets after the first iteration of every process, and a ring
        # all-reduce of more than two ranks sums each element in an order that depends on where it lies
        # in its bucket: a resumed process would round differently from the straight run (PyTorch's
        # doing, with or without checkpoints). Summing in rank order makes the average independent of
        # the buckets; two ranks need nothing (a + b == b + a).
        model.register_comm_hook(None, ordered_mean)
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=50, gamma=0.5)
    sampler = RecordingSampler(len(train_set), seed=args.seed)  # shards by rank
    loader = DataLoader(train_set, batch_size=16, sampler=sampler,
                        generator=torch.Generator().manual_seed(args.seed))
    ckpt = baton.torch.Checkpointer(model, optimizer, scheduler, sampler, chain_dir=args.chain_dir,
                                    interval=args.interval or None, keep=3)
    final_stage = slow_final_stage(ckpt, args.final_sleep) if args.final_sleep else {}
    restored = ckpt.restore()
    with open(os.path.join(args.results, f"restored-{args.rank}"), "w") as out:
        json.dump({"restored": restored, "iteration": ckpt.iteration, "sampler": sampler.state_dict(),
                   "chain_seq": os.environ.get("BATON_CHAIN_SEQ"), "pid": os.getpid()}, out)
    step = ckpt.iteration
    stop = min(args.steps, args.stop_at or args.steps)
    while step < stop and not ckpt.should_exit:
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if args.slow:
                time.sleep(args.slow)
            if step >= stop or ckpt.should_exit:
                break
    finished = step >= args.steps
    if finished:
        ckpt.done()
    ok = ckpt.close()  # a final checkpoint unless the newest one holds this iteration
    torch.save({"step": step, "model": model.module.state_dict(), "optimizer": optimizer.state_dict()},
               os.path.join(args.results, f"final-{args.rank}.pt"))
    with open(os.path.join(args.results, f"drawn-{args.rank}"), "w") as out:
        json.dump(sampler.drawn, out)
    with open(os.path.join(args.results, f"exit-{args.rank}"), "w") as out:
        json.dump({"step": step, "finished": finished, "should_exit": ckpt.should_exit, "closed_ok": ok,
                   "sampler": sampler.state_dict(), "final_stage": final_stage, "time_unix": time.time()}, out)
    torch.distributed.destroy_process_group()
    return 0


# --- the launcher ---------------------------------------------------------------------------------------

PR_SET_CHILD_SUBREAPER = 36


def zygote(args, parser):
    """Forks ranks on request: one JSON line {"argv": [...], "log": path} on stdin per rank, the rank's
    pid back on stdout. Everything a rank imports is imported here once; no torch operation runs here,
    so no thread pool exists that a fork would lose (the test sets OMP_NUM_THREADS=1 too), and the
    launcher has no thread but its own. Each rank is forked twice over, so that it is reparented to the
    test (its subreaper), which waits for it and sees its exit status; the launcher keeps no children."""
    import baton.torch  # noqa: F401
    import torch.nn.functional  # noqa: F401
    from torch.nn.parallel import DistributedDataParallel  # noqa: F401
    from torch.utils.data import DataLoader  # noqa: F401
    example = load_example(args.example)
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        print(f"the launcher has {threads} threads after its imports: forking it is unsafe", file=sys.stderr)
        return 1
    while True:
        line = sys.stdin.readline()
        if not line:
            return 0
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        read_pid, write_pid = os.pipe()
        middle = os.fork()
        if middle == 0:
            become_rank(request, parser, example, read_pid, write_pid)  # never returns
        os.close(write_pid)
        with os.fdopen(read_pid) as answer:
            rank_pid = answer.readline().strip()
        os.waitpid(middle, 0)  # once its parent is gone the rank is the test's
        print(rank_pid or "0", flush=True)


def become_rank(request, parser, example, read_pid, write_pid):
    """In the launcher's child: forks the rank, tells the launcher its pid and ends, so that the rank is
    reparented to the test. Whatever happens, a forked process ends here, never in the launcher's loop."""
    code = 1
    try:
        os.close(read_pid)
        rank_pid = os.fork()
        if rank_pid != 0:
            os.write(write_pid, f"{rank_pid}\n".encode())
            os._exit(0)
        os.close(write_pid)
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        code = worker(parser.parse_args(request["argv"]), example)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


class Rank:
    """A forked rank, the test's child by reparenting: polled, waited for and signalled like a Popen."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout):
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode

    def send_signal(self, sig):
        # Not reaped yet: the pid is still this rank's, even if it has just ended.
        if self.returncode is None:
            os.kill(self.pid, sig)


class Launcher:
    """The zygote of one test run."""

    def __init__(self, example):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise Failure(f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}")
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.process = subprocess.Popen([sys.executable, TEST_SCRIPT, "--zygote", "--example", example],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)

    def fork(self, argv, log):
        self.process.stdin.write(json.dumps({"argv": argv, "log": log}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line.strip().isdigit() or int(line) <= 0:
            raise Failure(f"the launcher could not fork a rank (it answered {line!r}, "
                          f"exit code {self.process.poll()})")
        return Rank(int(line))

    def close(self):
        if self.process.stdin:
            self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
