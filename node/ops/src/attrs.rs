//! Node attributes, decoded from the file into plain values, with typed accessors that give
//! errors naming the attribute.

use std::collections::BTreeMap;

use super::OpError;
use crate::model::GraphDef;
use crate::tensor::Tensor;

#[derive(Debug, Clone)]
pub enum AttrValue {
    Int(i64),
    Float(f32),
    String(String),
    Tensor(Tensor),
    Graph(Box<GraphDef>),
    Ints(Vec<i64>),
    Floats(Vec<f32>),
    Strings(Vec<String>),
    Tensors(Vec<Tensor>),
}

#[derive(Debug, Clone, Default)]
pub struct Attrs(pub BTreeMap<String, AttrValue>);

impl Attrs {
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.0.get(name)
    }

    pub fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    fn wrong(name: &str, want: &str, got: &AttrValue) -> OpError {
        OpError::invalid(format!(
            "attribute '{name}' should be {want}, found {}",
            match got {
                AttrValue::Int(_) => "an int",
                AttrValue::Float(_) => "a float",
                AttrValue::String(_) => "a string",
                AttrValue::Tensor(_) => "a tensor",
                AttrValue::Graph(_) => "a graph",
                AttrValue::Ints(_) => "a list of ints",
                AttrValue::Floats(_) => "a list of floats",
                AttrValue::Strings(_) => "a list of strings",
                AttrValue::Tensors(_) => "a list of tensors",
            }
        ))
    }

    pub fn int_opt(&self, name: &str) -> Result<Option<i64>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(AttrValue::Int(v)) => Ok(Some(*v)),
            Some(other) => Err(Self::wrong(name, "an int", other)),
        }
    }

    pub fn int(&self, name: &str, default: i64) -> Result<i64, OpError> {
        Ok(self.int_opt(name)?.unwrap_or(default))
    }

    pub fn float_opt(&self, name: &str) -> Result<Option<f32>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(AttrValue::Float(v)) => Ok(Some(*v)),
            // Some exporters write integral floats as ints.
            Some(AttrValue::Int(v)) => Ok(Some(*v as f32)),
            Some(other) => Err(Self::wrong(name, "a float", other)),
        }
    }

    pub fn float(&self, name: &str, default: f32) -> Result<f32, OpError> {
        Ok(self.float_opt(name)?.unwrap_or(default))
    }

    pub fn string_opt(&self, name: &str) -> Result<Option<&str>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(AttrValue::String(v)) => Ok(Some(v)),
            Some(other) => Err(Self::wrong(name, "a string", other)),
        }
    }

    pub fn string<'a>(&'a self, name: &str, default: &'a str) -> Result<&'a str, OpError> {
        Ok(self.string_opt(name)?.unwrap_or(default))
    }

    pub fn ints_opt(&self, name: &str) -> Result<Option<&[i64]>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(AttrValue::Ints(v)) => Ok(Some(v)),
            Some(other) => Err(Self::wrong(name, "a list of ints", other)),
        }
    }

    pub fn floats_opt(&self, name: &str) -> Result<Option<&[f32]>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(AttrValue::Floats(v)) => Ok(Some(v)),
            Some(other) => Err(Self::wrong(name, "a list of floats", other)),
        }
    }

    pub fn strings_opt(&self, name: &str) -> Result<Option<&[String]>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(AttrValue::Strings(v)) => Ok(Some(v)),
            Some(other) => Err(Self::wrong(name, "a list of strings", other)),
        }
    }

    pub fn tensor_opt(&self, name: &str) -> Result<Option<&Tensor>, OpError> {
        match self.get(name) {
            None => Ok(None),
            Some(AttrValue::Tensor(v)) => Ok(Some(v)),
            Some(other) => Err(Self::wrong(name, "a tensor", other)),
        }
    }
}
