#!/usr/bin/python3
"""torchrun (torch.distributed.run) whose own rendezvous store honours USE_LIBUV=0, as the ranks' do.

PyTorch 2.4 to 2.6 build the TCPStore of torchrun's rendezvous without passing use_libuv, so it asks for
libuv whatever USE_LIBUV says; Debian 13's python3-torch (2.6) has no libuv, and torchrun stops at its
start ("use_libuv was requested but PyTorch was build without libuv support"). With USE_LIBUV=0 this
gives those stores use_libuv=False, then runs torchrun's own main(): arguments, agent and signal
handling are torchrun's. Elsewhere (1.13, a build with libuv, USE_LIBUV unset) it changes nothing."""

import functools
import os
import sys

import torch.distributed
from torch.distributed import run
from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend, static_tcp_rendezvous

if os.environ.get("USE_LIBUV") == "0" and "use_libuv" in (torch.distributed.TCPStore.__init__.__doc__ or ""):
    without_libuv = functools.partial(torch.distributed.TCPStore, use_libuv=False)
    static_tcp_rendezvous.TCPStore = without_libuv
    c10d_rendezvous_backend.TCPStore = without_libuv

if __name__ == "__main__":
    sys.exit(run.main())
