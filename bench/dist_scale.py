#!/usr/bin/env python3
"""Data parallel on paper: the global batch at which a replica's compute
hides a ring all-reduce of its gradients, on N machines.

    t_allreduce = 2 (N - 1) / N * bytes / bandwidth + 2 (N - 1) * latency
    t_compute(b) = b * c          (b: the replica's rows, c: seconds per sample)
    hidden when t_compute(b) >= t_allreduce:  b* = t_allreduce / c,  B* = N b*

usage: dist_scale.py US_PER_SAMPLE BYTES [--machines N] [--latency-us L]
(US_PER_SAMPLE: measured compute per sample of one replica, microseconds;
BYTES: allreduce_bytes_per_step of mpcl-train --json, uncompressed).
Prints a markdown table for this model and for one 100x larger (bytes and
compute per sample both x100: an MLP's FLOPs per sample are ~6 x parameters),
at 10, 25 and 100 Gb/s, with f32 and with 16-bit gradients."""
import argparse
import math

ap = argparse.ArgumentParser()
ap.add_argument("us_per_sample", type=float)
ap.add_argument("bytes", type=float)
ap.add_argument("--machines", type=int, default=8)
ap.add_argument("--latency-us", type=float, default=25.0)
a = ap.parse_args()
N = a.machines
print(f"N = {N} machines, latency {a.latency_us:g} us per ring step, "
      f"compute {a.us_per_sample:g} us/sample (x100 for the large model)\n")
print("| model | gradients | link | all-reduce per step | B* per replica | global B* |")
print("| --- | --- | --- | --- | --- | --- |")
for name, scale in (("this MLP", 1), ("100x larger", 100)):
    for wire, factor in (("f32", 1.0), ("fp16/bf16", 0.5)):
        for gbps in (10, 25, 100):
            nbytes = a.bytes * scale * factor
            t = 2 * (N - 1) / N * nbytes / (gbps * 1e9 / 8) + 2 * (N - 1) * a.latency_us * 1e-6
            c = a.us_per_sample * scale * 1e-6
            b = math.ceil(t / c)
            print(f"| {name} | {wire} | {gbps} Gb/s | {t * 1e3:.2f} ms | {b} | {N * b} |")
