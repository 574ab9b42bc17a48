"""The processes carrying atomdeck's environment markers (ATOMDECK_RUN=run:name), with their /proc state and
listening TCP sockets. Standard library only: this file's text is also the command run ON a node
(`python3 -c <this file> MARKER...`, node_probes.processes_on_node), and the local launcher, whose nodes are
this machine, calls scan() in its own process (one read of /proc for every marker asked at once).

Output of the command, one line per process: "proc MARKER PID STATE COMM LISTEN,..." (LISTEN "-" for none)."""

import os
import socket
import sys


def _addr(hexa):
    a, p = hexa.split(":")
    raw = bytes.fromhex(a)
    if len(raw) == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
    else:
        ip = "[" + socket.inet_ntop(socket.AF_INET6, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))) + "]"
    return ip + ":" + str(int(p, 16))


def _listening(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    except OSError:
        pass
    found = set()
    if not inodes:
        return []
    for fam in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{fam}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if len(f) > 9 and f[3] == "0A" and f[9] in inodes:
                found.add(_addr(f[1]))
    return sorted(found)


def scan(marks, skip=()):
    """[(marker, pid, state letter, comm, [listening ip:port])] of the processes whose environment holds one of
    `marks` (bytes, "ATOMDECK_RUN=run:name"); pids in `skip` are left out."""
    wanted = set(marks)
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in skip:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                hit = wanted.intersection(f.read().split(b"\0"))
            if not hit:
                continue
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")].replace(" ", "_")
        if comm == "srun":
            continue  # the Slurm client of the step, not the process on the node
        state = st.rsplit(")", 1)[1].split()[0]
        listen = _listening(d)
        for m in hit:
            out.append((m, int(d), state, comm, listen))
    return out


if __name__ == "__main__":
    for m, pid, state, comm, listen in scan([a.encode() for a in sys.argv[1:]], {os.getpid()}):
        print("proc", m.decode(errors="replace"), pid, state, comm, ",".join(listen) or "-", flush=True)
