//! Tests of the Vulkan layer on whatever device the machine has (lavapipe in CI). Expected
//! values are computed independently on the CPU or in closed form.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::probes::{self, axpy, iota};
use common::{LONG, add_scalar, gpu, groups_1d, read_f32, run, upload_f32};
use vkml_vulkan::{Gpu, GpuBuffer, MemoryUse, Step, VulkanError};

#[test]
fn devices_are_listed_with_sane_limits() {
    let Some(gpu) = gpu() else { return };
    let vulkan = vkml_testkit::vulkan().unwrap();
    for (i, g) in vulkan.gpus().iter().enumerate() {
        let info = g.info();
        assert_eq!(info.index, i);
        assert!(!info.name.is_empty());
        assert!(info.api_version.starts_with("1."), "{}", info.api_version);
        assert!(info.memory_budget > 0);
        assert!(info.max_push_constants >= 128);
        assert!(info.max_shared_memory >= 16 * 1024);
        assert!(info.subgroup_size.is_power_of_two());
        assert!(info.max_workgroup_invocations >= 128);
        assert!(info.max_workgroup_count.iter().all(|&c| c >= 65_535));
        assert!(info.int64);
        if info.driver.contains("llvmpipe") {
            assert_eq!(info.vendor, "Mesa(lavapipe)");
            assert_eq!(info.device_type, "cpu");
            assert!(info.is_cpu);
            assert_eq!(g.spin_default(), Duration::ZERO);
        }
    }
    // Real GPUs are listed before CPU implementations.
    let first_cpu = vulkan.gpus().iter().position(|g| g.info().is_cpu);
    if let Some(first_cpu) = first_cpu {
        assert!(vulkan.gpus()[first_cpu..].iter().all(|g| g.info().is_cpu));
    }
    assert!(Arc::ptr_eq(&vulkan.gpus()[gpu.info().index], &gpu.arc()));
}

#[test]
fn host_visible_buffers_round_trip_and_check_bounds() {
    let Some(gpu) = gpu() else { return };
    for usage in [MemoryUse::Upload, MemoryUse::Readback] {
        let b = gpu.create_buffer(1000, usage, "round trip").unwrap();
        assert_eq!(b.size(), 1000);
        assert_ne!(b.address(), 0);
        assert_eq!(b.address() % 256, 0);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        b.write(0, &data).unwrap();
        b.write(990, &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]).unwrap();
        let mut back = vec![0u8; 1000];
        b.read(0, &mut back).unwrap();
        assert_eq!(&back[..990], &data[..990]);
        assert_eq!(&back[990..], &[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert!(matches!(
            b.write(995, &[0; 6]),
            Err(VulkanError::Invalid(_))
        ));
        assert!(matches!(
            b.read(u64::MAX, &mut [0; 2]),
            Err(VulkanError::Invalid(_))
        ));
    }
    let d = gpu.create_buffer(64, MemoryUse::Device, "device").unwrap();
    assert!(matches!(
        d.read(0, &mut [0; 4]),
        Err(VulkanError::Invalid(_))
    ));
}

#[test]
fn empty_and_impossible_buffers() {
    let Some(gpu) = gpu() else { return };
    let e = gpu.create_buffer(0, MemoryUse::Upload, "empty").unwrap();
    assert_eq!(e.size(), 0);
    assert_ne!(e.address(), 0);
    e.write(0, &[]).unwrap();
    assert!(e.write(0, &[1]).is_err());
    match gpu.create_buffer(1 << 60, MemoryUse::Device, "huge") {
        Err(VulkanError::OutOfMemory { bytes, name }) => {
            assert_eq!(bytes, 1 << 60);
            assert_eq!(name, "huge");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
}

#[test]
fn axpy_over_a_million_floats_matches_the_cpu() {
    let Some(gpu) = gpu() else { return };
    let n = 1_000_000;
    let x: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 - 500.0) / 64.0).collect();
    let y: Vec<f32> = (0..n).map(|i| (i % 77) as f32 * 0.25).collect();
    let alpha = 1.5f32;
    let xb = upload_f32(gpu, &x, "x");
    let yb = upload_f32(gpu, &y, "y");
    let out = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "out")
        .unwrap();
    let back = gpu
        .create_buffer(4 * n as u64, MemoryUse::Readback, "back")
        .unwrap();
    run(
        gpu,
        &[
            Step::dispatch(
                axpy::Variant::Main,
                axpy::Buffers {
                    x: xb.address(),
                    y: yb.address(),
                    out_: out.address(),
                },
                axpy::Params { n: n as u32, alpha },
                groups_1d(n, 256),
            ),
            Step::Barrier,
            Step::Copy {
                src: &out,
                src_offset: 0,
                dst: &back,
                dst_offset: 0,
                bytes: out.size(),
            },
        ],
    );
    let got = read_f32(&back);
    for i in 0..n {
        // x is a multiple of 1/64 and alpha of 1/2: every product and sum is exact in f32,
        // so a fused or unfused multiply-add gives the same bits.
        let want = alpha * x[i] + y[i];
        assert_eq!(got[i], want, "element {i}");
    }
}

#[test]
fn a_thousand_dispatch_list_replays() {
    let Some(gpu) = gpu() else { return };
    let n = 4096;
    let init: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let a = upload_f32(gpu, &init, "ping");
    let b = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "pong")
        .unwrap();
    let back = gpu
        .create_buffer(4 * n as u64, MemoryUse::Readback, "back")
        .unwrap();
    let mut steps = Vec::new();
    for k in 0..1000 {
        let (src, dst) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
        // Alternate the increments so a skipped or repeated dispatch changes the sum.
        let value = if k % 2 == 0 { 1.0 } else { 2.0 };
        steps.push(add_scalar(src.address(), dst.address(), n, value));
        steps.push(Step::Barrier);
    }
    steps.push(Step::Copy {
        src: &a,
        src_offset: 0,
        dst: &back,
        dst_offset: 0,
        bytes: a.size(),
    });
    let list = gpu.record(&steps).unwrap();
    assert_eq!(list.dispatches(), 1000);
    for replay in 1..=3 {
        let v = gpu.submit(&list).unwrap();
        assert!(gpu.wait_spin(v, gpu.spin_default(), LONG).unwrap());
        let got = read_f32(&back);
        for (i, g) in got.iter().enumerate() {
            assert_eq!(
                *g,
                i as f32 + 1500.0 * replay as f32,
                "replay {replay}, element {i}"
            );
        }
    }
}

#[test]
fn a_timed_list_says_what_each_dispatch_took() {
    let Some(gpu) = gpu() else { return };
    let n = 1 << 16;
    let a = upload_f32(gpu, &vec![0.0; n], "a");
    let b = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "b")
        .unwrap();
    let mut steps = Vec::new();
    for k in 0..4 {
        let (src, dst) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
        steps.push(add_scalar(src.address(), dst.address(), n, 1.0));
        steps.push(Step::Barrier);
    }
    let plain = gpu.record(&steps).unwrap();
    assert_eq!(plain.dispatch_times().unwrap(), None);
    if gpu.info().timestamp_period.is_none() {
        assert!(gpu.record_timed(&steps).is_err());
        return;
    }
    let timed = gpu.record_timed(&steps).unwrap();
    // Never submitted: no times yet.
    assert_eq!(timed.dispatch_times().unwrap(), None);
    let v = gpu.submit(&timed).unwrap();
    assert!(gpu.wait(v, LONG).unwrap());
    let times = timed.dispatch_times().unwrap().expect("completed");
    assert_eq!(times.len(), 4);
    // Each dispatch adds 65,536 floats: more than nothing, less than the test's patience.
    let total: u64 = times.iter().sum();
    assert!(total > 0 && total < 10_000_000_000, "{times:?}");
    assert_eq!(read_f32(&a)[..2], [4.0, 4.0]);
}

#[test]
fn large_launches_fold_into_y() {
    let Some(gpu) = gpu() else { return };
    let n = 256 * 70_000 + 3;
    let groups = groups_1d(n, 256);
    assert!(groups[1] > 1, "{groups:?} does not fold");
    let d = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "iota")
        .unwrap();
    let back = gpu
        .create_buffer(4 * n as u64, MemoryUse::Readback, "back")
        .unwrap();
    run(
        gpu,
        &[
            Step::Fill {
                dst: &d,
                offset: 0,
                bytes: d.size(),
                value: 0,
            },
            Step::Barrier,
            Step::dispatch(
                iota::Variant::Main,
                iota::Buffers { dst: d.address() },
                iota::Params { n: n as u32 },
                groups,
            ),
            Step::Barrier,
            Step::Copy {
                src: &d,
                src_offset: 0,
                dst: &back,
                dst_offset: 0,
                bytes: d.size(),
            },
        ],
    );
    let mut got = vec![0u32; n];
    back.read(0, bytemuck::cast_slice_mut(&mut got)).unwrap();
    // Each element written exactly once: a missed index reads 0, a repeated one 2 * (i + 1).
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, i as u32 + 1, "element {i}");
    }
}

#[test]
fn bad_steps_are_errors() {
    let Some(gpu) = gpu() else { return };
    let a = gpu.create_buffer(64, MemoryUse::Device, "a").unwrap();
    let b = gpu.create_buffer(64, MemoryUse::Device, "b").unwrap();
    let dispatch = |addrs: Vec<u64>, params: Vec<u32>| Step::Dispatch {
        kernel: probes::add_scalar::Variant::Main.kernel(),
        addrs,
        params,
        groups: [1, 1, 1],
    };
    // A dispatch built by hand with the wrong number of addresses or parameters.
    for (addrs, params) in [(1, 2), (2, 1), (3, 2)] {
        let err = gpu
            .record(&[dispatch(vec![a.address(); addrs], vec![0; params])])
            .unwrap_err();
        assert!(
            matches!(err, VulkanError::Invalid(ref m) if m.contains("the kernel takes 2 addresses")),
            "{err}"
        );
    }

    // An address past every buffer, and one inside a buffer (a view) which is fine.
    let stray = a.address().max(b.address()) + (1 << 30);
    let err = gpu
        .record(&[dispatch(vec![stray, a.address()], vec![16, 0])])
        .unwrap_err();
    assert!(
        matches!(err, VulkanError::Invalid(ref m) if m.contains("not inside")),
        "{err}"
    );
    gpu.record(&[add_scalar(a.address() + 32, b.address(), 8, 1.0)])
        .unwrap();

    let limit = gpu.info().max_workgroup_count[0];
    if limit < u32::MAX {
        let step = Step::dispatch(
            iota::Variant::Main,
            iota::Buffers { dst: a.address() },
            iota::Params { n: 0 },
            [limit + 1, 1, 1],
        );
        assert!(gpu.record(&[step]).is_err());
    }

    let copy = |src_offset, dst_offset, bytes| Step::Copy {
        src: &a,
        src_offset,
        dst: &b,
        dst_offset,
        bytes,
    };
    assert!(gpu.record(&[copy(0, 0, 64)]).is_ok());
    assert!(gpu.record(&[copy(1, 0, 64)]).is_err());
    assert!(gpu.record(&[copy(0, 60, 8)]).is_err());
    let overlapping = Step::Copy {
        src: &a,
        src_offset: 0,
        dst: &a,
        dst_offset: 8,
        bytes: 16,
    };
    assert!(gpu.record(&[overlapping]).is_err());
    let fill = |offset, bytes| Step::Fill {
        dst: &a,
        offset,
        bytes,
        value: 0,
    };
    assert!(gpu.record(&[fill(2, 4)]).is_err());
    assert!(gpu.record(&[fill(0, 6)]).is_err());
    assert!(gpu.record(&[fill(4, 60)]).is_ok());

    assert!(gpu.wait(u64::MAX, Duration::ZERO).is_err());
    let list = gpu.record(&[fill(0, 64)]).unwrap();
    assert!(gpu.submit_after(&list, u64::MAX).is_err());
}

#[test]
fn fill_covers_a_ragged_tail() {
    let Some(gpu) = gpu() else { return };
    let d = gpu.create_buffer(7, MemoryUse::Device, "ragged").unwrap();
    let back = gpu.create_buffer(7, MemoryUse::Readback, "back").unwrap();
    run(
        gpu,
        &[
            Step::Fill {
                dst: &d,
                offset: 0,
                bytes: 7,
                value: 0x0403_0201,
            },
            Step::Barrier,
            Step::Copy {
                src: &d,
                src_offset: 0,
                dst: &back,
                dst_offset: 0,
                bytes: 7,
            },
        ],
    );
    let mut got = [0u8; 7];
    back.read(0, &mut got).unwrap();
    assert_eq!(got, [1, 2, 3, 4, 1, 2, 3]);
}

#[test]
fn a_list_keeps_its_buffers_alive() {
    let Some(gpu) = gpu() else { return };
    let n = 1024;
    let src = upload_f32(gpu, &vec![3.0; n], "src");
    let tmp = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "tmp")
        .unwrap();
    let back = gpu
        .create_buffer(4 * n as u64, MemoryUse::Readback, "back")
        .unwrap();
    let list = gpu
        .record(&[
            add_scalar(src.address(), tmp.address(), n, 0.5),
            Step::Barrier,
            Step::Copy {
                src: &tmp,
                src_offset: 0,
                dst: &back,
                dst_offset: 0,
                bytes: tmp.size(),
            },
        ])
        .unwrap();
    drop(src);
    drop(tmp);
    // The freed memory must not be handed out again while the list holds it.
    let other = upload_f32(gpu, &vec![-1.0; n], "other");
    let v = gpu.submit(&list).unwrap();
    assert!(gpu.wait(v, LONG).unwrap());
    assert!(read_f32(&back).iter().all(|&x| x == 3.5));
    assert!(read_f32(&other).iter().all(|&x| x == -1.0));
}

#[test]
fn concurrent_submits_from_four_threads() {
    let Some(gpu) = gpu() else { return };
    let n = 2048;
    std::thread::scope(|s| {
        for t in 0..4 {
            s.spawn(move || {
                let a = upload_f32(gpu, &vec![t as f32; n], "a");
                let b = gpu
                    .create_buffer(4 * n as u64, MemoryUse::Readback, "b")
                    .unwrap();
                let list = gpu
                    .record(&[add_scalar(a.address(), b.address(), n, 0.25)])
                    .unwrap();
                for round in 0..20 {
                    let v = gpu.submit(&list).unwrap();
                    assert!(gpu.wait_spin(v, gpu.spin_default(), LONG).unwrap());
                    let got = read_f32(&b);
                    assert!(
                        got.iter().all(|&x| x == t as f32 + 0.25),
                        "thread {t} round {round}"
                    );
                    // Change the input so a stale result would show.
                    a.write(0, bytemuck::cast_slice(&vec![(t + round + 1) as f32; n]))
                        .unwrap();
                    let v = gpu.submit(&list).unwrap();
                    assert!(gpu.wait(v, LONG).unwrap());
                    let want = (t + round + 1) as f32 + 0.25;
                    assert!(
                        read_f32(&b).iter().all(|&x| x == want),
                        "thread {t} round {round}"
                    );
                    a.write(0, bytemuck::cast_slice(&vec![t as f32; n]))
                        .unwrap();
                }
            });
        }
    });
}

#[test]
fn one_list_submitted_from_four_threads_runs_once_per_submit() {
    let Some(gpu) = gpu() else { return };
    let n = 4096;
    let acc = upload_f32(gpu, &vec![0.0; n], "acc");
    // In place: overlapping runs of this list would lose increments.
    let list = gpu
        .record(&[add_scalar(acc.address(), acc.address(), n, 1.0)])
        .unwrap();
    let last = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut last = 0;
                    for _ in 0..25 {
                        last = last.max(gpu.submit(&list).unwrap());
                    }
                    last
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .max()
            .unwrap()
    });
    assert!(gpu.wait(last, LONG).unwrap());
    assert!(gpu.completed().unwrap() >= last);
    assert!(read_f32(&acc).iter().all(|&x| x == 100.0));
}

#[test]
fn submissions_chain_on_the_gpu_with_submit_after() {
    let Some(gpu) = gpu() else { return };
    let n = 1 << 16;
    let a = upload_f32(gpu, &vec![1.0; n], "a");
    let b = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "b")
        .unwrap();
    let c = gpu
        .create_buffer(4 * n as u64, MemoryUse::Readback, "c")
        .unwrap();
    let first = gpu
        .record(&[add_scalar(a.address(), b.address(), n, 2.0)])
        .unwrap();
    let second = gpu
        .record(&[add_scalar(b.address(), c.address(), n, 4.0)])
        .unwrap();
    for _ in 0..10 {
        let v1 = gpu.submit(&first).unwrap();
        let v2 = gpu.submit_after(&second, v1).unwrap();
        assert!(v2 > v1);
        assert!(gpu.wait(v2, LONG).unwrap());
        assert!(read_f32(&c).iter().all(|&x| x == 7.0));
        c.write(0, bytemuck::cast_slice(&vec![0f32; n])).unwrap();
    }
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<vkml_vulkan::Vulkan>();
    check::<Gpu>();
    check::<GpuBuffer>();
    check::<vkml_vulkan::CommandList>();
}

/// Every kernel of the build whose features the test GPU has becomes a pipeline on it: so no
/// kernel exceeds this device's limits (shared memory, workgroup size, push constants), which
/// glslang cannot check. On lavapipe (CI) that is every kernel but the tensor-core ones.
#[test]
fn every_kernel_the_gpu_supports_builds_a_pipeline() {
    let Some(gpu) = gpu() else { return };
    let have = gpu.info().shader_features;
    let buf = gpu.create_buffer(64, MemoryUse::Device, "any").unwrap();
    let mut built = 0;
    for &kernel in vkml_shaders::all() {
        if !kernel.needs().met_by(have) {
            continue;
        }
        let words = (kernel.push_bytes() - 8 * kernel.buffers()) / 4;
        // An empty grid records nothing, but the pipeline is created all the same.
        let step = Step::Dispatch {
            kernel,
            addrs: vec![buf.address(); kernel.buffers() as usize],
            params: vec![0; words as usize],
            groups: [0, 0, 0],
        };
        gpu.record(&[step])
            .unwrap_or_else(|e| panic!("{kernel} on {}: {e}", gpu.info().name));
        built += 1;
    }
    assert!(built > 200, "only {built} kernels checked");
}

#[test]
fn imported_host_memory_is_shared_by_its_buffers() {
    let Some(gpu) = gpu() else { return };
    let Some(align) = gpu.info().host_import_alignment else {
        return;
    };
    let block = vkml_vulkan::HostBlock::new(3000, align).unwrap();
    assert_eq!(block.size() % align, 0);
    assert!(block.size() >= 3000);
    // Two imports of one block stand for the two GPUs of a transfer: what one writes by a
    // GPU copy, the other (and the host) sees.
    let a = gpu.import_host(&block, "bridge a").unwrap();
    let b = gpu.import_host(&block, "bridge b").unwrap();
    assert_eq!(a.usage(), MemoryUse::Host);
    let data: Vec<u8> = (0..1024u32).map(|i| (i * 13 % 251) as u8).collect();
    a.write(0, &data).unwrap();
    let dev = gpu.create_buffer(1024, MemoryUse::Device, "dev").unwrap();
    run(
        gpu,
        &[
            Step::Copy {
                src: &b,
                src_offset: 0,
                dst: &dev,
                dst_offset: 0,
                bytes: 1024,
            },
            Step::Barrier,
            Step::Copy {
                src: &dev,
                src_offset: 0,
                dst: &a,
                dst_offset: 2048,
                bytes: 1024,
            },
        ],
    );
    let mut back = vec![0u8; 1024];
    b.read(2048, &mut back).unwrap();
    assert_eq!(back, data);
    drop(a);
    // The block outlives the first import: the second still reads it.
    b.read(0, &mut back).unwrap();
    assert_eq!(back, data);
    assert!(matches!(
        gpu.create_buffer(16, MemoryUse::Host, "x"),
        Err(VulkanError::Invalid(_))
    ));
}
