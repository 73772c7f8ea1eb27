//! Dispatch and submit costs, for tuning on real GPUs:
//! `cargo bench -p vkml-vulkan --bench timing`. Prints what a dispatch costs with and without
//! the barrier a dependency needs, what a dependency costs when it is carried by a flag in
//! memory instead (probes/chain_add*.comp), what one run's result costs to reach the host by each
//! way of reading it back, what recording costs, and what an armed list saves (gate.rs).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{LONG, add_scalar, read_f32};
use vkml_testkit::device_copy;
use vkml_vulkan::{Gpu, GpuBuffer, MemoryUse, Step};

fn main() {
    let Some(gpu) = common::gpu() else {
        println!("no GPU (VKML_SKIP_VULKAN=1): nothing to time");
        return;
    };
    println!("{:?}", gpu.info());
    dispatch_report(gpu);
    arm_report();
}

fn dispatch_report(gpu: &Gpu) {
    let n = 256;
    let a = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "a")
        .unwrap();
    let b = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "b")
        .unwrap();
    let back = gpu.create_buffer(4, MemoryUse::Readback, "back").unwrap();
    let count = 10_000;
    for (barriers, exec_only) in [(false, false), (true, false), (true, true)] {
        let mut steps = Vec::new();
        for k in 0..count {
            let (s, d) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
            steps.push(add_scalar(s.address(), d.address(), n, 1.0));
            match (barriers, exec_only) {
                (true, false) => steps.push(Step::Barrier),
                (true, true) => steps.push(Step::ExecutionBarrier),
                _ => {}
            }
        }
        let list = gpu.record(&steps).unwrap();
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = Instant::now();
            let v = gpu.submit(&list).unwrap();
            assert!(gpu.wait(v, LONG).unwrap());
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{count} dispatches, barriers {barriers} (execution only: {exec_only}): {:.3} us per dispatch",
            best * 1e6 / count as f64
        );
    }
    flag_chain_report(gpu, count);
    let list = gpu
        .record(&[
            add_scalar(a.address(), b.address(), n, 1.0),
            Step::Barrier,
            Step::Copy {
                src: &b,
                src_offset: 0,
                dst: &back,
                dst_offset: 0,
                bytes: 4,
            },
        ])
        .unwrap();
    for spin in [Duration::ZERO, gpu.spin_default(), Duration::from_millis(1)] {
        let mut times = Vec::new();
        let mut submits = Vec::new();
        let mut out = [0u8; 4];
        for _ in 0..2000 {
            let t = Instant::now();
            let v = gpu.submit(&list).unwrap();
            submits.push(t.elapsed().as_secs_f64() * 1e6);
            assert!(gpu.wait_spin(v, spin, LONG).unwrap());
            back.read(0, &mut out).unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        times.sort_by(f64::total_cmp);
        submits.sort_by(f64::total_cmp);
        println!(
            "vkQueueSubmit alone: median {:.1} us",
            submits[submits.len() / 2]
        );
        println!(
            "submit + wait (spin {spin:?}) + readback of 1 dispatch: median {:.1} us, p10 {:.1}, p90 {:.1}",
            times[times.len() / 2],
            times[times.len() / 10],
            times[times.len() * 9 / 10]
        );
    }
    // What one run's result costs to get back, by way of reaching the host: the copy the
    // executor records today (barrier, then a transfer into readback memory), a compute copy
    // instead of the transfer, the dispatch writing straight into readback memory, and an
    // empty list (the floor: a submission and its signal).
    let direct = add_scalar(a.address(), back.address(), 1, 1.0);
    let copy_shader = Step::dispatch(
        vkml_shaders::copy::Variant::Main,
        vkml_shaders::copy::Buffers {
            x: b.address(),
            y: back.address(),
        },
        vkml_shaders::copy::Params { n: 1 },
        [1, 1, 1],
    );
    let transfer = Step::Copy {
        src: &b,
        src_offset: 0,
        dst: &back,
        dst_offset: 0,
        bytes: 4,
    };
    let one = add_scalar(a.address(), b.address(), 1, 1.0);
    let paths: [(&str, Vec<Step<'_>>); 4] = [
        (
            "dispatch, barrier, transfer",
            vec![one.clone(), Step::Barrier, transfer],
        ),
        (
            "dispatch, barrier, compute copy",
            vec![one.clone(), Step::Barrier, copy_shader],
        ),
        ("dispatch into readback memory", vec![direct]),
        ("nothing", vec![]),
    ];
    for (name, steps) in paths {
        let list = gpu.record(&steps).unwrap();
        let mut out = [0u8; 4];
        let mut times = Vec::new();
        for _ in 0..3000 {
            let t = Instant::now();
            let v = gpu.submit(&list).unwrap();
            assert!(gpu.wait_spin(v, gpu.spin_default(), LONG).unwrap());
            back.read(0, &mut out).unwrap();
            times.push(t.elapsed().as_secs_f64() * 1e6);
        }
        times.sort_by(f64::total_cmp);
        println!(
            "submit + wait + read, {name}: median {:.1} us, p10 {:.1}, p90 {:.1}",
            times[times.len() / 2],
            times[times.len() / 10],
            times[times.len() * 9 / 10]
        );
    }
    let t = Instant::now();
    let steps: Vec<_> = (0..1000)
        .map(|_| add_scalar(a.address(), b.address(), n, 1.0))
        .collect();
    let _list = gpu.record(&steps).unwrap();
    println!(
        "recording 1000 dispatches: {:.1} us",
        t.elapsed().as_secs_f64() * 1e6
    );
}

/// The flag-chain kernels: chain_add.comp's two variants and chain_add_vmm.comp.
#[derive(Clone, Copy, Debug)]
enum Chain {
    Coherent,
    Cached,
    Vmm,
}

/// Link `index` of a flag chain: adds 1 to `n` floats of `src` into `dst` once link
/// `index - 1` raised its flag, then raises its own.
fn chain_link(chain: Chain, src: u64, dst: u64, flags: u64, index: u32, n: u32) -> Step<'static> {
    use common::probes::{chain_add, chain_add_vmm};
    let groups = [1, 1, 1];
    let value = 1.0;
    match chain {
        Chain::Vmm => Step::dispatch(
            chain_add_vmm::Variant::Main,
            chain_add_vmm::Buffers { src, dst, flags },
            chain_add_vmm::Params { index, n, value },
            groups,
        ),
        Chain::Coherent | Chain::Cached => Step::dispatch(
            match chain {
                Chain::Coherent => chain_add::Variant::Coherent,
                _ => chain_add::Variant::Cached,
            },
            chain_add::Buffers { src, dst, flags },
            chain_add::Params { index, n, value },
            groups,
        ),
    }
}

/// A chain of dependent one-workgroup dispatches ordered by flags in memory instead of
/// barriers (probes/chain_add*.comp): what a dependency costs when the GPU need not drain between
/// dispatches, with the data read past the cache (`coherent`), through it (`cached`), under
/// the Vulkan memory model (`vmm`), and with no data at all (0 floats: the signal alone).
/// Every run's result is checked, so a link that read stale data shows as wrong values.
fn flag_chain_report(gpu: &Gpu, count: usize) {
    let len = 64;
    for (shader, n, barriers) in [
        (Chain::Coherent, len, false),
        (Chain::Coherent, 0, false),
        (Chain::Cached, len, false),
        (Chain::Vmm, len, false),
        (Chain::Vmm, 0, false),
        (Chain::Coherent, len, true),
    ] {
        let zeroed = |bytes: usize, name| device_copy(gpu, &vec![0u8; bytes], name).unwrap();
        let (a, b) = (zeroed(4 * len, "a"), zeroed(4 * len, "b"));
        let flags = zeroed(4 * count, "flags");
        let back = gpu
            .create_buffer(4 * len as u64, MemoryUse::Readback, "back")
            .unwrap();
        let mut steps = Vec::new();
        for k in 0..count {
            let (src, dst) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
            steps.push(chain_link(
                shader,
                src.address(),
                dst.address(),
                flags.address(),
                k as u32,
                n as u32,
            ));
            if barriers {
                steps.push(Step::Barrier);
            }
        }
        let list = gpu.record(&steps).unwrap();
        // `count` is even, so the last link writes `a`.
        let check = gpu.record(&[Step::Barrier, whole_copy(&a, &back)]).unwrap();
        let mut times = Vec::new();
        let mut wrong = 0;
        for r in 1..=7 {
            let t = Instant::now();
            let v = gpu.submit(&list).unwrap();
            assert!(
                gpu.wait(v, Duration::from_secs(10)).unwrap(),
                "the flag chain of {shader:?} hung"
            );
            times.push(t.elapsed().as_secs_f64());
            let v = gpu.submit(&check).unwrap();
            assert!(gpu.wait(v, LONG).unwrap());
            let want = if n == 0 { 0.0 } else { (r * count) as f32 };
            wrong += read_f32(&back).iter().filter(|&&x| x != want).count();
        }
        times.sort_by(f64::total_cmp);
        println!(
            "{count} dispatches chained by flags ({shader:?}, {n} floats, barriers {barriers}): \
             median {:.3} us per dispatch, best {:.3}; {wrong} of {} values wrong in 7 runs",
            times[times.len() / 2] * 1e6 / count as f64,
            times[0] * 1e6 / count as f64,
            7 * len
        );
    }
}

fn whole_copy<'b>(src: &'b GpuBuffer, dst: &'b GpuBuffer) -> Step<'b> {
    Step::Copy {
        src,
        src_offset: 0,
        dst,
        dst_offset: 0,
        bytes: src.size(),
    }
}

/// What an armed list saves on this GPU for one dispatch writing into readback memory (a small
/// model's run), from "input ready" to "result read": part of the timing bench. Armed lists are queued outside the timed part, 50 µs before
/// their release, just before it, or (as the executor does) behind the previous run. Each is
/// timed with the result seen through the timeline semaphore, as the executor does, and by
/// polling the result's own word in readback memory, to show what the semaphore costs.
fn arm_report() {
    let Some(gpu) = common::own_gpu() else { return };
    let a = gpu.create_buffer(4, MemoryUse::Upload, "a").unwrap();
    let back = gpu.create_buffer(4, MemoryUse::Readback, "back").unwrap();
    let steps = [add_scalar(a.address(), back.address(), 1, 1.0)];
    let plain = gpu.record(&steps).unwrap();
    let gated = [
        Arc::new(gpu.record_gated(&steps).unwrap()),
        Arc::new(gpu.record_gated(&steps).unwrap()),
    ];
    let report = |name: &str, mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        println!(
            "{name}: median {:.1} us, p10 {:.1}, p90 {:.1}",
            v[v.len() / 2],
            v[v.len() / 10],
            v[v.len() * 9 / 10]
        );
    };
    let read = || {
        let mut out = [0u8; 4];
        back.read(0, &mut out).unwrap();
        f32::from_le_bytes(out)
    };
    // Each run adds 1 to a new input; `poll` waits for the result's word instead of the
    // timeline (then waits for the timeline, untimed, before the next arming).
    let mut input = 0f32;
    let mut next_input = || {
        input += 1.0;
        a.write(0, &input.to_le_bytes()).unwrap();
        input + 1.0
    };
    let finish = |value: u64, want: f32, poll: bool, t: Instant| -> f64 {
        if poll {
            while read() != want {
                std::hint::spin_loop();
            }
        } else {
            assert!(gpu.wait_spin(value, gpu.spin_default(), LONG).unwrap());
            assert_eq!(read(), want);
        }
        let us = t.elapsed().as_secs_f64() * 1e6;
        assert!(gpu.wait_spin(value, gpu.spin_default(), LONG).unwrap());
        us
    };
    let runs = 3000;
    for round in 0..2 {
        for poll in [false, true] {
            let how = if poll { "polled" } else { "timeline" };
            let mut times = Vec::new();
            for _ in 0..runs {
                let want = next_input();
                let t = Instant::now();
                let v = gpu.submit(&plain).unwrap();
                times.push(finish(v, want, poll, t));
            }
            report(&format!("round {round}, {how}: submitted"), times);
            for gap in [Duration::from_micros(50), Duration::ZERO] {
                let mut times = Vec::new();
                for _ in 0..runs {
                    let armed = gpu.arm(&gated[0], 0).unwrap().expect("armed");
                    let t = Instant::now();
                    while t.elapsed() < gap {
                        std::hint::spin_loop();
                    }
                    let want = next_input();
                    let t = Instant::now();
                    let v = armed.fire().unwrap().expect("still armed");
                    times.push(finish(v, want, poll, t));
                }
                report(
                    &format!("round {round}, {how}: armed, released {gap:?} after arming"),
                    times,
                );
            }
            // As the executor: each run arms the other recording behind itself.
            let mut times = Vec::new();
            let mut armed = gpu.arm(&gated[0], 0).unwrap();
            for run in 0..runs {
                let want = next_input();
                let t = Instant::now();
                let value = match armed.take().map(|a| a.fire().unwrap()) {
                    Some(Some(v)) => v,
                    _ => gpu.submit(&gated[run % 2]).unwrap(),
                };
                armed = gpu.arm(&gated[(run + 1) % 2], value).unwrap();
                times.push(finish(value, want, poll, t));
            }
            drop(armed);
            report(
                &format!("round {round}, {how}: armed behind the previous run"),
                times,
            );
        }
        // What other work pays when it finds a list armed: the disarmed run goes first.
        let mut times = Vec::new();
        for _ in 0..runs {
            let armed = gpu.arm(&gated[0], 0).unwrap().expect("armed");
            let want = next_input();
            let t = Instant::now();
            let v = gpu.submit(&plain).unwrap();
            times.push(finish(v, want, false, t));
            drop(armed);
        }
        report(
            &format!("round {round}: submitted with a list armed ahead (disarmed)"),
            times,
        );
    }
}
