//! Einsum equations: parsing, and resolving against input shapes into sizes and strides.

use crate::OpError;

/// One input's or the output's subscripts: labels, with the ellipsis as `None` (at most one).
type Term = Vec<Option<char>>;

#[derive(Debug, Clone, PartialEq)]
pub struct Equation {
    inputs: Vec<Term>,
    /// `None`: implicit (no `->`).
    output: Option<Term>,
}

/// An equation resolved against shapes. Labels are numbered output first, then summed.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub out_shape: Vec<usize>,
    pub out_sizes: Vec<usize>,
    pub sum_sizes: Vec<usize>,
    /// Per input, its element stride for each label (0 where it lacks the label or
    /// broadcasts it).
    pub strides: Vec<Vec<usize>>,
}

impl Plan {
    pub fn out_count(&self) -> usize {
        self.out_sizes.iter().product()
    }
    pub fn sum_count(&self) -> usize {
        self.sum_sizes.iter().product()
    }
}

fn bad(msg: String) -> OpError {
    OpError::invalid(format!("Einsum: {msg}"))
}

fn term(s: &str, eq: &str) -> Result<Term, OpError> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("...") {
            if out.contains(&None) {
                return Err(bad(format!("'{eq}' has two ellipses in one term")));
            }
            out.push(None);
            rest = &rest[3..];
        } else if c.is_ascii_alphabetic() {
            out.push(Some(c));
            rest = &rest[1..];
        } else {
            return Err(bad(format!("'{eq}' has an unexpected character '{c}'")));
        }
    }
    Ok(out)
}

impl Equation {
    pub fn parse(eq: &str) -> Result<Equation, OpError> {
        let clean: String = eq.chars().filter(|c| !c.is_whitespace()).collect();
        let (lhs, rhs) = match clean.split_once("->") {
            Some((l, r)) => (l, Some(r)),
            None => (&clean[..], None),
        };
        let inputs = lhs
            .split(',')
            .map(|t| term(t, eq))
            .collect::<Result<Vec<_>, _>>()?;
        let output = rhs.map(|r| term(r, eq)).transpose()?;
        if let Some(o) = &output {
            for (i, l) in o.iter().enumerate() {
                if o[..i].contains(l) {
                    return Err(bad(format!("'{eq}' repeats an output subscript")));
                }
                if l.is_some() && !inputs.iter().any(|t| t.contains(l)) {
                    return Err(bad(format!(
                        "'{eq}': output subscript {l:?} is in no input"
                    )));
                }
            }
        }
        Ok(Equation { inputs, output })
    }

    pub fn plan(&self, shapes: &[&[usize]]) -> Result<Plan, OpError> {
        if shapes.len() != self.inputs.len() {
            return Err(bad(format!(
                "the equation has {} inputs, the node {}",
                self.inputs.len(),
                shapes.len()
            )));
        }
        // Label ids: letters as themselves, ellipsis dimension k (counted from the right) as
        // a private id.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
        enum L {
            Dots(usize),
            C(char),
        }
        let mut ell_rank = 0;
        let mut per_input: Vec<Vec<(L, usize, usize)>> = Vec::new(); // (label, size, stride)
        for (t, shape) in self.inputs.iter().zip(shapes) {
            let letters = t.iter().filter(|l| l.is_some()).count();
            let has_dots = t.contains(&None);
            if shape.len() < letters || (!has_dots && shape.len() != letters) {
                return Err(bad(format!(
                    "term of {} subscripts does not fit shape {shape:?}",
                    t.len()
                )));
            }
            let dots = shape.len() - letters;
            ell_rank = ell_rank.max(dots);
            let st = crate::tensor::strides(shape);
            let mut labs = Vec::new();
            let mut axis = 0;
            for l in t {
                match l {
                    Some(c) => {
                        labs.push((L::C(*c), shape[axis], st[axis]));
                        axis += 1;
                    }
                    None => {
                        for k in 0..dots {
                            labs.push((L::Dots(dots - 1 - k), shape[axis], st[axis]));
                            axis += 1;
                        }
                    }
                }
            }
            per_input.push(labs);
        }
        // Sizes, with broadcasting of size 1 along ellipsis dimensions only.
        let mut sizes = std::collections::BTreeMap::new();
        for labs in &per_input {
            for &(l, s, _) in labs {
                let e = sizes.entry(l).or_insert(s);
                if *e != s {
                    match l {
                        L::Dots(_) if *e == 1 => *e = s,
                        L::Dots(_) if s == 1 => {}
                        _ => return Err(bad(format!("subscript {l:?} has sizes {e} and {s}"))),
                    }
                }
            }
        }
        let dots: Vec<L> = (0..ell_rank).rev().map(L::Dots).collect();
        let out: Vec<L> = match &self.output {
            Some(o) => o
                .iter()
                .flat_map(|l| match l {
                    Some(c) => vec![L::C(*c)],
                    None => dots.clone(),
                })
                .collect(),
            None => {
                let mut once: Vec<L> = sizes
                    .keys()
                    .filter(|l| matches!(l, L::C(_)))
                    .filter(|l| {
                        per_input
                            .iter()
                            .flatten()
                            .filter(|(m, _, _)| m == *l)
                            .count()
                            == 1
                    })
                    .copied()
                    .collect();
                once.sort();
                dots.iter().copied().chain(once).collect()
            }
        };
        if self.output.as_ref().is_some_and(|o| !o.contains(&None)) && ell_rank > 0 {
            // numpy sums broadcast dimensions away only if they are all 1; ONNX keeps the rule.
            if dots.iter().any(|d| sizes[d] != 1) {
                return Err(bad("the output drops the ellipsis".into()));
            }
        }
        let summed: Vec<L> = sizes.keys().filter(|l| !out.contains(l)).copied().collect();
        let all: Vec<L> = out.iter().chain(&summed).copied().collect();
        let strides = per_input
            .iter()
            .map(|labs| {
                all.iter()
                    .map(|l| {
                        labs.iter()
                            .filter(|(m, s, _)| m == l && *s != 1)
                            .map(|(_, _, st)| st)
                            .sum()
                    })
                    .collect()
            })
            .collect();
        let out_sizes: Vec<usize> = out.iter().map(|l| sizes[l]).collect();
        Ok(Plan {
            out_shape: out_sizes.clone(),
            out_sizes,
            sum_sizes: summed.iter().map(|l| sizes[l]).collect(),
            strides,
        })
    }
}
