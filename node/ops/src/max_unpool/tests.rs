use super::*;
use crate::AttrValue;
use crate::testkit::{Rng, gpu_matches_cpu, node, op, run};

fn ints(v: &[i64]) -> AttrValue {
    AttrValue::Ints(v.to_vec())
}

#[test]
fn spec_example_with_and_without_output_shape() {
    let x = Tensor::from_vec(vec![1, 1, 2, 2], vec![5.0f32, 6.0, 7.0, 8.0]);
    let i = Tensor::from_vec(vec![1, 1, 2, 2], vec![5i64, 7, 13, 15]);
    let attrs = vec![("kernel_shape", ints(&[2, 2])), ("strides", ints(&[2, 2]))];
    let unpool = op("MaxUnpool", 11, attrs.clone(), 2).unwrap();
    let y = run(&*unpool, &[Some(&x), Some(&i)]).unwrap().remove(0);
    assert_eq!(y.shape(), [1, 1, 4, 4]);
    let mut want = vec![0.0; 16];
    for (at, v) in [(5, 5.0), (7, 6.0), (13, 7.0), (15, 8.0)] {
        want[at] = v;
    }
    assert_eq!(y.to_f64_vec().unwrap(), want);

    // A 5 x 5 output keeps the 4 x 4 coordinates: (1, 1), (1, 3), (3, 1), (3, 3).
    let unpool = op("MaxUnpool", 11, attrs, 3).unwrap();
    let shape = Tensor::from_vec(vec![4], vec![1i64, 1, 5, 5]);
    let y = run(&*unpool, &[Some(&x), Some(&i), Some(&shape)])
        .unwrap()
        .remove(0);
    let mut want = vec![0.0; 25];
    for (at, v) in [(6, 5.0), (8, 6.0), (16, 7.0), (18, 8.0)] {
        want[at] = v;
    }
    assert_eq!(y.to_f64_vec().unwrap(), want);

    let small = Tensor::from_vec(vec![4], vec![1i64, 1, 3, 5]);
    let err = run(&*unpool, &[Some(&x), Some(&i), Some(&small)]).unwrap_err();
    assert!(err.to_string().contains("smaller"), "{err}");
    let bad = Tensor::from_vec(vec![1, 1, 2, 2], vec![5i64, 7, 16, 15]);
    let err = run(&*unpool, &[Some(&x), Some(&bad), Some(&shape)]).unwrap_err();
    assert!(err.to_string().contains("index 16"), "{err}");
}

/// MaxPool's values and indices of `x`.
fn max_pool(x: &Tensor, attrs: &[(&str, AttrValue)]) -> (Tensor, Tensor) {
    let pool = node("MaxPool", 12, attrs.to_vec(), 1, 2).unwrap();
    let mut out = run(&*pool, &[Some(x)]).unwrap();
    let i = out.remove(1);
    (out.remove(0), i)
}

#[test]
fn inverse_of_max_pool() {
    // A shape that unpools back whole, 6 x 6 under a 3 x 2 kernel with strides 2 and one row
    // of padding on top. Positive values, so that pooling the unpooled tensor (the maxima in place, zeros
    // elsewhere) finds the same maxima again.
    let mut rng = Rng::new(9);
    let v: Vec<f32> = rng
        .f32s(2 * 3 * 6 * 6)
        .iter()
        .map(|v| v.abs() + 0.1)
        .collect();
    let x = Tensor::from_vec(vec![2, 3, 6, 6], v);
    let attrs = [
        ("kernel_shape", ints(&[3, 2])),
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 0, 0, 0])),
    ];
    let (pooled, idx) = max_pool(&x, &attrs);
    let unpool = op("MaxUnpool", 11, attrs.to_vec(), 2).unwrap();
    let y = run(&*unpool, &[Some(&pooled), Some(&idx)])
        .unwrap()
        .remove(0);
    assert_eq!(y.shape(), x.shape());
    let (yv, xv) = (y.to_f64_vec().unwrap(), x.to_f64_vec().unwrap());
    let picked: Vec<usize> = idx
        .to_i64_vec()
        .unwrap()
        .iter()
        .map(|&i| i as usize)
        .collect();
    for (k, (&yk, &xk)) in yv.iter().zip(&xv).enumerate() {
        assert_eq!(
            yk,
            if picked.contains(&k) { xk } else { 0.0 },
            "element {k}"
        );
    }
    let (again, _) = max_pool(&y, &attrs);
    assert_eq!(again.to_f64_vec().unwrap(), pooled.to_f64_vec().unwrap());
}

#[test]
fn gpu_matches_cpu_on_odd_shapes() {
    let mut rng = Rng::new(4);
    type Case = (
        &'static [usize],
        &'static [i64],
        &'static [i64],
        &'static [i64],
        Option<&'static [i64]>,
    );
    let cases: [Case; 3] = [
        (&[2, 3, 8, 6], &[2, 2], &[2, 2], &[0, 0, 0, 0], None),
        (
            &[1, 5, 11, 6],
            &[3, 3],
            &[2, 1],
            &[1, 1, 1, 0],
            Some(&[1, 5, 13, 9]),
        ),
        (
            &[2, 2, 5, 4, 6],
            &[2, 3, 2],
            &[1, 2, 2],
            &[0, 1, 0, 1, 0, 0],
            None,
        ),
    ];
    // Shapes that MaxUnpool gives back whole, so MaxPool's indices address them.
    for (shape, kernel, strides, pads, out) in cases {
        let x = rng.tensor_f32(shape);
        let attrs = [
            ("kernel_shape", ints(kernel)),
            ("strides", ints(strides)),
            ("pads", ints(pads)),
        ];
        let (pooled, idx) = max_pool(&x, &attrs);
        let out = out.map(|o| Tensor::from_vec(vec![o.len()], o.to_vec()));
        let unpool = op("MaxUnpool", 11, attrs.to_vec(), 3).unwrap();
        gpu_matches_cpu(&*unpool, &[Some(&pooled), Some(&idx), out.as_ref()], 0.0);
    }
}
