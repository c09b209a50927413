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



def store_options():
    """The TCPStore arguments that USE_LIBUV asks for: {"use_libuv": False} with USE_LIBUV=0 where
    TCPStore takes the setting (2.4 and later), else none. The ranks' store clients use them too."""
    if os.environ.get("USE_LIBUV") == "0" and "use_libuv" in (torch.distributed.TCPStore.__init__.__doc__ or ""):
        return {"use_libuv": False}
    return {}


if __name__ == "__main__":
    if store_options():
        store = functools.partial(torch.distributed.TCPStore, **store_options())
        static_tcp_rendezvous.TCPStore = store
        c10d_rendezvous_backend.TCPStore = store
    sys.exit(run.main())
