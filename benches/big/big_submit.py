#!/usr/bin/env python3
"""The loopback target of issue 19: a model larger than any one node, submitted to a cluster of
nodes on 127.0.0.1, three times.

  make_chain.py --out /tmp/big-model --bytes 1.2e9 --reference
  big_submit.py --model-dir /tmp/big-model --work /tmp/big-work [--nodes 3] [--device cpu]

It starts N nodes (n1..nN, --insecure on loopback, n2..nN joining n1), each capped at
--cap-fraction of the model's weight bytes (--device-memory-limit), so the model only fits split
over them, each with its own weight cache (--cache-dir WORK/cache-nK, --cache-size). Then:

  1. submits the model (vkml-node submit, inputs x.npy) and measures the client's wall time and
     peak RSS, each node's peak RSS (VmHWM) and the weight bytes each node received or took
     from its cache (weight_bytes_received, weight_bytes_cached in `status --json`), and
     compares the output with ref.npy (max|a-b| / max|b|);
  2. submits again: the weights are already on the nodes, so the bytes sent must be a small
     fraction of the model;
  3. restarts one participant (the last, never n1) on the same cache folder, waits for it to
     be alive, submits a third time and reports what it received again vs took from its cache.

It prints a table and exits nonzero if a target is missed: client peak RSS > 512 MiB, a node's
peak RSS > its part of the weights (received + cached) + 400 MiB, the second submission's bytes
received > 1% of the weight bytes, or an output's error > the tolerance (1e-4 for float32).
The nodes are always killed at the end; every wait is bounded.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np

MiB = 1 << 20
CLIENT_RSS_LIMIT = 512 * MiB
NODE_RSS_SLACK = 400 * MiB
SECOND_FRACTION_LIMIT = 0.01
COUNTERS = ("weight_bytes_received", "weight_bytes_cached")


class Failure(Exception):
    """A step could not be done (as opposed to a target missed): the message says why."""


def log_tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return "(no log)"


def free_udp_ports(n):
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def vmhwm(pid):
    """Peak resident set of a live process, bytes (VmHWM)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def model_info(model_dir):
    """(model path, weight bytes, dtype name, input name, output name) from meta.json, else
    from the graph (loaded without its external data)."""
    meta_path = os.path.join(model_dir, "meta.json")
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            m = json.load(f)
        return (os.path.join(model_dir, m["model"]), m["weight_bytes"], m["dtype"], m["input"],
                m["output"])
    import onnx

    onnx_files = sorted(f for f in os.listdir(model_dir) if f.endswith(".onnx"))
    if len(onnx_files) != 1:
        raise Failure(f"{model_dir}: no meta.json and not exactly one .onnx file ({onnx_files})")
    path = os.path.join(model_dir, onnx_files[0])
    model = onnx.load(path, load_external_data=False)
    total = 0
    for t in model.graph.initializer:
        ext = {e.key: e.value for e in t.external_data}
        total += int(ext["length"]) if "length" in ext else len(t.raw_data)
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = [i.name for i in g.input if i.name not in inits]
    return path, total, "float32", inputs[0], g.output[0].name


class Cluster:
    def __init__(self, a, weight_bytes):
        self.a = a
        self.bin = a.bin
        self.n = a.nodes
        self.cap = int(a.cap_bytes) if a.cap_bytes else int(a.cap_fraction * weight_bytes)
        self.cache_size = int(a.cache_size if a.cache_size else 4 * weight_bytes)
        ports = [a.base_port + k for k in range(self.n)] if a.base_port else free_udp_ports(self.n)
        self.addrs = [f"127.0.0.1:{p}" for p in ports]
        self.names = [f"n{k + 1}" for k in range(self.n)]
        self.procs = [None] * self.n
        self.logs = [None] * self.n
        self.has_cache_flags = "--cache-dir" in subprocess.run(
            [self.bin, "--help"], capture_output=True, text=True, timeout=30).stdout

    def node_cmd(self, k):
        cmd = [self.bin, "--listen", self.addrs[k], "--insecure", "--name", self.names[k],
               "--device", self.a.device, "--device-memory-limit", str(self.cap)]
        if self.has_cache_flags:
            cmd += ["--cache-dir", os.path.join(self.a.cache_root, f"cache-{self.names[k]}"),
                    "--cache-size", str(self.cache_size)]
        if k == 0 and self.a.first_maps_model:
            cmd += ["--models", os.path.abspath(self.a.model_dir)]
        if k > 0:
            cmd += ["--join", self.addrs[0]]
        return cmd

    def start(self, k):
        path = os.path.join(self.a.work, f"{self.names[k]}.log")
        if self.logs[k] is not None:
            self.logs[k].close()
        self.logs[k] = open(path, "a")
        self.logs[k].write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(self.node_cmd(k))}\n")
        self.logs[k].flush()
        self.procs[k] = subprocess.Popen(self.node_cmd(k), stdout=self.logs[k],
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def stop(self, k, timeout=10):
        p = self.procs[k]
        if p is None:
            return
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout)
        self.procs[k] = None

    def stop_all(self):
        for k in range(self.n):
            try:
                self.stop(k)
            except Exception as e:  # keep stopping the others
                print(f"warning: stopping {self.names[k]}: {e}", file=sys.stderr)
        for f in self.logs:
            if f is not None:
                f.close()

    def check_running(self):
        for k, p in enumerate(self.procs):
            if p is not None and p.poll() is not None:
                log = os.path.join(self.a.work, f"{self.names[k]}.log")
                raise Failure(f"node {self.names[k]} exited (rc {p.returncode}); its log "
                              f"{log} ends:\n{log_tail(log)}")

    def status(self, k, timeout=10):
        """`status --json` as node k sees it, or None when it does not answer (yet)."""
        try:
            r = subprocess.run([self.bin, "status", "--to", self.addrs[k], "--insecure", "--json"],
                               capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError:
            return None

    def wait_alive(self, timeout, not_generation=None):
        """Until every node sees all N members alive (and, after a restart, node k's new
        generation: not_generation = (k, old generation))."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            self.check_running()
            ok = True
            for k in range(self.n):
                st = self.status(k)
                last = st
                members = {m.get("name"): m for m in (st or {}).get("members", [])}
                if not st or any(members.get(nm, {}).get("state") != "alive" for nm in self.names):
                    ok = False
                    break
                if not_generation and members[self.names[not_generation[0]]].get(
                        "generation") == not_generation[1]:
                    ok = False
                    break
            if ok:
                return
            time.sleep(0.5)
        raise Failure(f"the {self.n} nodes were not all alive within {timeout} s; last status "
                      f"seen: {json.dumps(last)[:2000]}")

    def generation(self, k):
        st = self.status(0) or {}
        for m in st.get("members", []):
            if m.get("name") == self.names[k]:
                return m.get("generation")
        return None

    def counters(self, k):
        """{counter: bytes} for node k: from its own `status --json`, at the top level or in
        its own members[] entry (at any depth), else from n1's entry for it."""
        views = [self.status(k), self.status(0) if k else None]
        found = {}
        for st in views:
            if not st:
                continue
            for key in COUNTERS:
                if key in found:
                    continue
                if st.get("node") == self.names[k] and isinstance(st.get(key), (int, float)):
                    found[key] = st[key]
                    continue
                for m in st.get("members", []):
                    if m.get("name") == self.names[k]:
                        v = find_key(m, key)
                        if v is not None:
                            found[key] = v
        missing = [c for c in COUNTERS if c not in found]
        if missing:
            raise Failure(
                f"`vkml-node status --json` has no {', '.join(missing)} for {self.names[k]} "
                f"(looked at the top level of {self.names[k]}'s own status and in the members[] "
                f"entries): this vkml-node predates the weight counters; its status keys are "
                f"{sorted((views[0] or {}).keys())}")
        return found


def find_key(obj, key):
    if isinstance(obj, dict):
        if isinstance(obj.get(key), (int, float)):
            return obj[key]
        for v in obj.values():
            r = find_key(v, key)
            if r is not None:
                return r
    elif isinstance(obj, list):
        for v in obj:
            r = find_key(v, key)
            if r is not None:
                return r
    return None


def submit(a, cluster, model, input_name, tag, timeout, repeat=1):
    """Runs the client; returns (wall s, peak RSS bytes, output dir). Peak RSS from wait4 on
    this one child (not RUSAGE_CHILDREN, which would mix in restarted nodes)."""
    out = os.path.join(a.work, f"out{tag}")
    shutil.rmtree(out, ignore_errors=True)
    log = os.path.join(a.work, f"submit{tag}.log")
    cmd = [a.bin, "submit", model, "--to", cluster.addrs[0], "--insecure",
           "--input", f"{input_name}={os.path.join(a.work, 'x.npy')}", "--output-dir", out,
           "--repeat", str(repeat)]
    with open(log, "w") as lf:
        lf.write(" ".join(cmd) + "\n")
        lf.flush()
        t0 = time.time()
        p = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        status = rusage = None
        while True:
            pid, status, rusage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if time.time() - t0 > timeout:
                p.kill()
                _, status, rusage = os.wait4(p.pid, 0)
                p.returncode = -9
                raise Failure(f"submission {tag} ran past {timeout} s; {log} ends:\n"
                              f"{log_tail(log)}")
            time.sleep(0.05)
        wall = time.time() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        last = (log_tail(log, 1).strip() or "no output")[:300]
        raise Failure(f"submission {tag} failed (rc {p.returncode}): {last}\n{log} ends:\n"
                      f"{log_tail(log)}")
    return wall, rusage.ru_maxrss * 1024, out


def median_us(log):
    """The median latency `submit --repeat` printed, in microseconds (None without one)."""
    for line in open(log):
        if line.startswith("latency over") and "median" in line:
            return float(line.split("median")[1].split("us")[0])
    return None


def placed_bytes(log):
    """Bytes the plan reserves per node, from the placement `submit` prints."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    out = {}
    for line in open(log):
        t = line.split()
        if len(t) == 5 and t[-1] in units and t[0].startswith("n"):
            try:
                out[t[0]] = out.get(t[0], 0) + float(t[3]) * units[t[4]]
            except ValueError:
                pass
    return out


def single_node(a, model, input_name, weight_bytes):
    """One uncapped node holding the whole model (mapped from its models folder): the
    latency a user gets without a cluster, for comparison."""
    saved = (a.nodes, a.first_maps_model)
    a.nodes, a.first_maps_model = 1, True
    one = Cluster(a, weight_bytes)
    capped = one.node_cmd

    def uncapped(k):
        cmd = capped(k)
        i = cmd.index("--device-memory-limit")
        return cmd[:i] + cmd[i + 2:]

    one.node_cmd = uncapped
    try:
        one.start(0)
        one.wait_alive(a.start_timeout)
        wall, rss, _ = submit(a, one, model, input_name, "single", a.submit_timeout, a.repeat)
        med = median_us(os.path.join(a.work, "submitsingle.log"))
        print(f"one uncapped node: load + {a.repeat} runs {wall:.2f} s, median run {med} us, "
              f"client peak RSS {rss / MiB:.0f} MiB, node peak RSS "
              f"{(vmhwm(one.procs[0].pid) or 0) / MiB:.0f} MiB")
        return med
    finally:
        one.stop_all()
        a.nodes, a.first_maps_model = saved


def rel_err(y, ref):
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if y.shape != ref.shape:
        return float("inf")
    return float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", default="/work/main/target/release/vkml-node")
    p.add_argument("--model-dir", required=True, help="made by make_chain.py (with --reference)")
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--cap-fraction", type=float, default=0.45,
                   help="each node's --device-memory-limit, as a fraction of the weight bytes")
    p.add_argument("--device", default="cpu", help="cpu, vulkan, ... (passed as --device)")
    p.add_argument("--work", default="/tmp/big-work", help="logs, caches, outputs (created)")
    p.add_argument("--cache-size", type=float, default=0,
                   help="each node's --cache-size in bytes (default 4x the weight bytes)")
    p.add_argument("--base-port", type=int, default=0,
                   help="UDP ports base..base+N-1 (default: free ports)")
    p.add_argument("--tolerance", type=float, default=None,
                   help="max relative error (default 1e-4, 2e-2 for float16 models)")
    p.add_argument("--start-timeout", type=float, default=90, help="seconds for nodes to be alive")
    p.add_argument("--submit-timeout", type=float, default=1200, help="seconds per submission")
    p.add_argument("--cap-bytes", type=float, default=0,
                   help="each node's --device-memory-limit in bytes (overrides --cap-fraction)")
    p.add_argument("--first-maps-model", action="store_true",
                   help="n1 (the node submitted to) gets --models MODEL_DIR: it maps the model "
                        "instead of receiving it, as a node holding the file would")
    p.add_argument("--cache-root", default=None,
                   help="where the nodes' caches go (default: WORK; /dev/shm keeps them in RAM)")
    p.add_argument("--no-restart", action="store_true", help="skip submission 3 (the restart)")
    p.add_argument("--repeat", type=int, default=1,
                   help="runs per submission (the median latency is reported)")
    p.add_argument("--single", action="store_true",
                   help="then run the model on one uncapped node, for comparison")
    a = p.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    if a.nodes < 2:
        p.error("--nodes must be at least 2 (one is restarted)")
    a.work = os.path.abspath(a.work)
    os.makedirs(a.work, exist_ok=True)
    a.cache_root = os.path.abspath(a.cache_root or a.work)
    os.makedirs(a.cache_root, exist_ok=True)

    model, weight_bytes, dtype, input_name, output_name = model_info(a.model_dir)
    tol = a.tolerance if a.tolerance is not None else (2e-2 if dtype == "float16" else 1e-4)
    ref_path = os.path.join(a.model_dir, "ref.npy")
    if not os.path.exists(ref_path):
        print(f"error: {ref_path} missing: make the model with make_chain.py --reference",
              file=sys.stderr)
        return 2
    ref = np.load(ref_path)
    for k in range(a.nodes):  # a cache left by an earlier run would hide the first transfer
        shutil.rmtree(os.path.join(a.cache_root, f"cache-n{k + 1}"), ignore_errors=True)
    shutil.copy(os.path.join(a.model_dir, "x.npy"), os.path.join(a.work, "x.npy"))

    cluster = Cluster(a, weight_bytes)
    print(f"model {model}: {weight_bytes / 1e9:.3f} GB of {dtype} weights; {a.nodes} nodes, "
          f"each capped at {cluster.cap / 1e9:.3f} GB ({a.cap_fraction} of the weights), "
          f"device {a.device}, ports {', '.join(cluster.addrs)}; work in {a.work}")
    failures = []
    if not cluster.has_cache_flags:
        failures.append(f"{a.bin} has no --cache-dir: nodes started without a weight cache")
        print(f"warning: {failures[-1]}", file=sys.stderr)

    rows = []
    # Per node life: the largest part (received + cached in one submission) it has held.
    max_part = [0] * a.nodes
    prev = None
    old_int = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        for k in range(a.nodes):
            cluster.start(k)
            if k == 0:
                time.sleep(0.3)
        cluster.wait_alive(a.start_timeout)
        print(f"{a.nodes} nodes alive")
        # Fresh processes: every counter starts at 0 (read after the first submission, so a
        # binary without the counters still shows how far the submission gets).
        prev = [{c: 0 for c in COUNTERS} for _ in range(a.nodes)]

        restarted = None
        for tag in ((1, 2) if a.no_restart else (1, 2, 3)):
            if tag == 3:
                restarted = a.nodes - 1
                gen = cluster.generation(restarted)
                print(f"restarting {cluster.names[restarted]} on its cache")
                cluster.stop(restarted)
                cluster.start(restarted)
                cluster.wait_alive(a.start_timeout, not_generation=(restarted, gen))
                max_part[restarted] = 0
                prev[restarted] = {c: 0 for c in COUNTERS}
                print(f"{cluster.names[restarted]} alive again")
            wall, client_rss, out = submit(a, cluster, model, input_name, tag, a.submit_timeout,
                                           a.repeat)
            log = os.path.join(a.work, f"submit{tag}.log")
            print(f"submission {tag}: plan reserves "
                  f"{ {n: round(b / MiB) for n, b in placed_bytes(log).items()} } MiB; "
                  f"median run {median_us(log)} us over {a.repeat}")
            cluster.check_running()
            y_path = os.path.join(out, f"{output_name}.npy")
            if not os.path.exists(y_path):
                raise Failure(f"submission {tag} wrote no {y_path}")
            err = rel_err(np.load(y_path), ref)
            hwm = [vmhwm(cluster.procs[k].pid) for k in range(a.nodes)]
            print(f"submission {tag}: {wall:.2f} s, client peak RSS {client_rss / MiB:.0f} MiB, "
                  f"node peak RSS {[None if h is None else round(h / MiB) for h in hwm]} MiB, "
                  f"max rel err {err:.2e}")
            now = [cluster.counters(k) for k in range(a.nodes)]
            recv = [now[k]["weight_bytes_received"] - prev[k]["weight_bytes_received"]
                    for k in range(a.nodes)]
            cached = [now[k]["weight_bytes_cached"] - prev[k]["weight_bytes_cached"]
                      for k in range(a.nodes)]
            prev = now
            rows.append(dict(tag=tag, wall=wall, client=client_rss, hwm=hwm, recv=recv,
                             cached=cached, err=err))
            print(f"submission {tag}: weights received {[f'{r / 1e6:.1f}' for r in recv]} MB, "
                  f"from caches {[f'{c / 1e6:.1f}' for c in cached]} MB; received per node over "
                  f"the submission's wall time {[f'{r / 1e9 / wall:.2f}' for r in recv]} GB/s")

            if client_rss > CLIENT_RSS_LIMIT:
                failures.append(f"submission {tag}: client peak RSS {client_rss / MiB:.0f} MiB "
                                f"> {CLIENT_RSS_LIMIT / MiB:.0f} MiB")
            for k in range(a.nodes):
                max_part[k] = max(max_part[k], recv[k] + cached[k])
                if hwm[k] is not None and hwm[k] > max_part[k] + NODE_RSS_SLACK:
                    failures.append(
                        f"submission {tag}: {cluster.names[k]} peak RSS {hwm[k] / MiB:.0f} MiB > "
                        f"its part {max_part[k] / MiB:.0f} MiB + {NODE_RSS_SLACK / MiB:.0f} MiB")
            if not err <= tol:
                failures.append(f"submission {tag}: max rel error {err:.3g} > {tol:g}")
            if tag == 1 and sum(recv) + sum(cached) < 0.99 * weight_bytes:
                failures.append(f"submission 1: the nodes received or cached "
                                f"{(sum(recv) + sum(cached)) / 1e9:.3f} GB of "
                                f"{weight_bytes / 1e9:.3f} GB of weights")
            if tag == 2 and sum(recv) > SECOND_FRACTION_LIMIT * weight_bytes:
                failures.append(f"submission 2: received {sum(recv) / 1e6:.1f} MB = "
                                f"{100 * sum(recv) / weight_bytes:.2f}% of the weights "
                                f"> {100 * SECOND_FRACTION_LIMIT:g}%")
            if tag == 3:
                r, c = recv[restarted], cached[restarted]
                print(f"after the restart {cluster.names[restarted]} received {r / 1e6:.1f} MB "
                      f"and took {c / 1e6:.1f} MB from its cache "
                      f"({100 * r / max(r + c, 1):.1f}% received)")
    except Failure as e:
        print(f"\nFAILED: {e}", file=sys.stderr)
        failures.append(str(e).splitlines()[0])
    except KeyboardInterrupt:
        failures.append("interrupted")
    finally:
        cluster.stop_all()
        signal.signal(signal.SIGTERM, old_int)
    if a.single:
        try:
            single_node(a, model, input_name, weight_bytes)
        except Failure as e:
            print(f"\nFAILED (single node): {e}", file=sys.stderr)
            failures.append(str(e).splitlines()[0])

    if rows:
        names = cluster.names
        print()
        print(f"{'submission':>10} {'wall s':>8} {'client MiB':>10}  "
              f"{'peak RSS MiB ' + '/'.join(names):>24}  "
              f"{'received MB ' + '/'.join(names):>30}  {'cached MB':>20}  {'max rel err':>11}")
        for r in rows:
            rss = "/".join("?" if h is None else f"{h / MiB:.0f}" for h in r["hwm"])
            recv = "/".join(f"{b / 1e6:.1f}" for b in r["recv"])
            cached = "/".join(f"{b / 1e6:.1f}" for b in r["cached"])
            print(f"{r['tag']:>10} {r['wall']:>8.2f} {r['client'] / MiB:>10.0f}  {rss:>24}  "
                  f"{recv:>30}  {cached:>20}  {r['err']:>11.2e}")
    print()
    if failures:
        print("targets missed:")
        for f in failures:
            print(f"  - {f}")
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
