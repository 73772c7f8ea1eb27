//! The float math Softmax shares with the activations, written once for f32 and f64.

use crate::tensor::Element;

pub trait Real: Element + Copy + PartialOrd + Default {
    fn exp(self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn to_f64(self) -> f64;
    fn is_nan(self) -> bool;
    fn from_f64(v: f64) -> Self;
    const ONE: Self;
}

macro_rules! real {
    ($($t:ty),*) => {$(
        impl Real for $t {
            fn exp(self) -> Self { <$t>::exp(self) }
            fn sub(self, o: Self) -> Self { self - o }
            fn to_f64(self) -> f64 { self as f64 }
            fn is_nan(self) -> bool { <$t>::is_nan(self) }
            fn from_f64(v: f64) -> Self { v as $t }
            const ONE: Self = 1.0;
        }
    )*};
}
real!(f32, f64);
