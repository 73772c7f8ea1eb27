//! Armed lists (gate.rs): what they see, what disarms them, and what they save.

use std::sync::Arc;

mod common;

use common::{LONG, add_scalar, own_gpu};
use vkml_vulkan::{GpuBuffer, MemoryUse, Step};

/// An armed list sees host writes made after it was queued; anything else submitted to the
/// GPU disarms it, and then it runs at once on what its inputs hold and firing it says so; a
/// dropped Armed disarms too; a disarmed list submits as usual afterwards.
#[test]
fn armed_lists_see_late_writes_and_step_aside_for_other_work() {
    let Some(gpu) = own_gpu() else { return };
    let a = gpu.create_buffer(4, MemoryUse::Upload, "a").unwrap();
    let back = gpu.create_buffer(4, MemoryUse::Readback, "back").unwrap();
    let other = gpu.create_buffer(4, MemoryUse::Readback, "other").unwrap();
    let read = |b: &GpuBuffer| {
        let mut out = [0u8; 4];
        b.read(0, &mut out).unwrap();
        f32::from_le_bytes(out)
    };
    let set = |x: f32| a.write(0, &x.to_le_bytes()).unwrap();
    let steps = [add_scalar(a.address(), back.address(), 1, 1.5)];
    let list = Arc::new(gpu.record_gated(&steps).unwrap());
    set(2.0);
    let v = gpu.submit(&list).unwrap();
    assert!(gpu.wait(v, LONG).unwrap());
    assert_eq!(read(&back), 3.5);

    let plain = Arc::new(gpu.record(&steps).unwrap());
    assert!(gpu.arm(&plain, 0).is_err(), "only gated lists can be armed");
    let armed = gpu.arm(&list, 0).unwrap().expect("armed");
    set(4.0);
    let v = armed.fire().unwrap().expect("still armed");
    assert!(gpu.wait_spin(v, gpu.spin_default(), LONG).unwrap());
    assert_eq!(
        read(&back),
        5.5,
        "the armed list saw the write made after arming"
    );

    // Other work arrives while a list is armed: the list runs first, on what `a` holds.
    let armed = gpu.arm(&list, 0).unwrap().expect("armed");
    set(10.0);
    let side = gpu
        .record(&[add_scalar(a.address(), other.address(), 1, 1.0)])
        .unwrap();
    let w = gpu.submit(&side).unwrap();
    assert!(w > armed.value(), "queued behind the disarmed list");
    assert!(
        gpu.wait(w, LONG).unwrap(),
        "other work is not stuck behind the gate"
    );
    assert_eq!(read(&other), 11.0);
    assert_eq!(read(&back), 11.5, "the disarmed list ran");
    assert_eq!(
        armed.fire().unwrap(),
        None,
        "firing a disarmed list says so"
    );
    set(7.0);
    let v = gpu.submit(&list).unwrap();
    assert!(gpu.wait(v, LONG).unwrap());
    assert_eq!(read(&back), 8.5, "submitted as usual after a disarm");

    // Arming another list disarms the one armed before.
    let first = gpu.arm(&list, 0).unwrap().expect("armed");
    let second_list = Arc::new(gpu.record_gated(&steps).unwrap());
    let second = gpu.arm(&second_list, 0).unwrap().expect("armed");
    assert_eq!(first.fire().unwrap(), None, "disarmed by the second arming");
    set(20.0);
    let v = second.fire().unwrap().expect("still armed");
    assert!(gpu.wait(v, LONG).unwrap());
    assert_eq!(read(&back), 21.5);

    // Dropped unfired: disarmed, and the queue moves on.
    let armed = gpu.arm(&list, 0).unwrap().expect("armed");
    let value = armed.value();
    drop(armed);
    assert!(gpu.wait(value, LONG).unwrap());
    set(1.0);
    let v = gpu.submit(&list).unwrap();
    assert!(gpu.wait(v, LONG).unwrap());
    assert_eq!(read(&back), 2.5);
}

/// Arming behind a submission still running: the armed list starts only after it, and sees
/// what it wrote (the executor's pattern, two recordings armed in turn).
#[test]
fn lists_armed_in_turn_follow_each_other() {
    let Some(gpu) = own_gpu() else { return };
    let n = 4096;
    let x = gpu
        .create_buffer(4 * n as u64, MemoryUse::Upload, "x")
        .unwrap();
    let y = gpu
        .create_buffer(4 * n as u64, MemoryUse::Device, "y")
        .unwrap();
    let out = gpu
        .create_buffer(4 * n as u64, MemoryUse::Readback, "out")
        .unwrap();
    // y = x + 1 then out = y + 2, with a dependency inside the list.
    let steps = [
        add_scalar(x.address(), y.address(), n, 1.0),
        Step::Barrier,
        add_scalar(y.address(), out.address(), n, 2.0),
    ];
    let lists = [
        Arc::new(gpu.record_gated(&steps).unwrap()),
        Arc::new(gpu.record_gated(&steps).unwrap()),
    ];
    let mut armed = gpu.arm(&lists[0], 0).unwrap();
    for run in 0..20usize {
        let input: Vec<f32> = (0..n).map(|i| (i * 7 + run) as f32).collect();
        x.write(0, bytemuck::cast_slice(&input)).unwrap();
        let i = run % 2;
        let value = match armed.take().map(|a| a.fire().unwrap()) {
            Some(Some(v)) => v,
            _ => gpu.submit(&lists[i]).unwrap(),
        };
        armed = gpu.arm(&lists[i ^ 1], value).unwrap();
        assert!(armed.is_some(), "run {run}: the other recording arms");
        assert!(gpu.wait_spin(value, gpu.spin_default(), LONG).unwrap());
        let mut got = vec![0f32; n];
        out.read(0, bytemuck::cast_slice_mut(&mut got)).unwrap();
        for (k, (g, x)) in got.iter().zip(&input).enumerate() {
            assert_eq!(*g, x + 3.0, "run {run}, element {k}");
        }
    }
}
