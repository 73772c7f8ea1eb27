//! (to be written)
pub struct Session;
#[derive(Debug, Clone, Default)]
pub struct SessionOptions;
#[derive(Debug, Clone, Copy, Default)]
pub enum DeviceSelection { #[default] Auto }
