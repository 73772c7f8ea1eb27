//! ImageDecoder (opset 20): an encoded image file (a 1-D uint8 tensor) to its pixels, uint8
//! [H, W, 3] in RGB or BGR order, or [H, W, 1] for Grayscale. CPU only: decoding is branchy
//! byte parsing, nothing a shader does well, and the output is small next to a model's work.
//!
//! H and W are in the bytes, so the rule asks for the input's value ([`OpError::NeedsValue`])
//! and reads the header to learn them. Decoding is the `image` crate's, with only the formats
//! ONNX's tests name that a pure-Rust decoder handles: BMP, JPEG, PNG, PNM, TIFF and WebP.
//! JPEG 2000 has no such decoder and is refused by name.
//!
//! The conversions follow ONNX's reference (Pillow): colour images come out as decoded
//! (alpha dropped, grey and palette images expanded to RGB, as the spec's [H, W, 3] says), and
//! Grayscale is Pillow's `convert("L")`, ITU-R 601-2 luma in 16-bit fixed point.

use std::io::{Cursor, ErrorKind};

use image::{DynamicImage, ImageError, ImageFormat, ImageReader};

use super::util::req;
use super::{InferInput, NodeSpec, Op, OpError, Registry, ValueType};
use crate::tensor::{DType, Tensor};

pub fn register(r: &mut Registry) {
    r.add("ImageDecoder", ImageDecoder::build);
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum PixelFormat {
    Rgb,
    Bgr,
    Grayscale,
}

impl PixelFormat {
    fn channels(self) -> usize {
        match self {
            PixelFormat::Rgb | PixelFormat::Bgr => 3,
            PixelFormat::Grayscale => 1,
        }
    }
}

#[derive(Debug)]
struct ImageDecoder {
    pixel_format: PixelFormat,
}

impl ImageDecoder {
    fn build(spec: &NodeSpec<'_>) -> Result<Box<dyn Op>, OpError> {
        let pixel_format = match spec.attrs.string("pixel_format", "RGB")? {
            "RGB" => PixelFormat::Rgb,
            "BGR" => PixelFormat::Bgr,
            "Grayscale" => PixelFormat::Grayscale,
            other => {
                return Err(OpError::invalid(format!(
                    "ImageDecoder: pixel_format '{other}': it is RGB, BGR or Grayscale"
                )));
            }
        };
        Ok(Box::new(ImageDecoder { pixel_format }))
    }
}

/// The encoded bytes of input 0, checked to be a 1-D uint8 tensor.
fn stream(t: &Tensor) -> Result<&[u8], OpError> {
    if t.dtype() != DType::U8 || t.rank() != 1 {
        return Err(OpError::invalid(format!(
            "ImageDecoder: encoded_stream must be a 1-D uint8 tensor (the file's bytes), found \
             {}",
            ValueType::of(t)
        )));
    }
    Ok(t.bytes())
}

/// The JPEG 2000 signatures: a JP2 file's signature box, and a bare codestream's SOC + SIZ
/// markers. `image` knows neither, and no maintained pure-Rust decoder exists, so these are
/// named in the refusal rather than reported as unknown bytes.
fn is_jpeg2000(bytes: &[u8]) -> bool {
    bytes.starts_with(b"\x00\x00\x00\x0cjP  \r\n\x87\n") || bytes.starts_with(b"\xff\x4f\xff\x51")
}

fn format_name(f: ImageFormat) -> &'static str {
    match f {
        ImageFormat::Bmp => "BMP",
        ImageFormat::Jpeg => "JPEG",
        ImageFormat::Png => "PNG",
        ImageFormat::Pnm => "PNM",
        ImageFormat::Tiff => "TIFF",
        ImageFormat::WebP => "WebP",
        ImageFormat::Gif => "GIF",
        ImageFormat::Ico => "ICO",
        ImageFormat::Avif => "AVIF",
        ImageFormat::OpenExr => "OpenEXR",
        ImageFormat::Hdr => "Radiance HDR",
        ImageFormat::Qoi => "QOI",
        ImageFormat::Tga => "TGA",
        ImageFormat::Dds => "DDS",
        ImageFormat::Farbfeld => "farbfeld",
        _ => "this",
    }
}

const SUPPORTED: &str = "BMP, JPEG, PNG, PNM, TIFF and WebP";

/// `image`'s decoder over an in-memory stream.
type Reader<'a> = ImageReader<Cursor<&'a [u8]>>;

/// A reader over the bytes with their format recognised (and the format's name), or the
/// error naming why not.
fn reader(bytes: &[u8]) -> Result<(Reader<'_>, &'static str), OpError> {
    if is_jpeg2000(bytes) {
        return Err(OpError::unsupported(format!(
            "ImageDecoder: the stream is a JPEG 2000 image, which vkml does not decode (it \
             decodes {SUPPORTED}); convert the image to one of those"
        )));
    }
    let r = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| OpError::invalid(format!("ImageDecoder: reading the stream: {e}")))?;
    let Some(format) = r.format() else {
        let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
        return Err(OpError::invalid(format!(
            "ImageDecoder: the {} bytes of encoded_stream are not an image file of a known \
             format (they start {}); vkml decodes {SUPPORTED}",
            bytes.len(),
            if head.is_empty() {
                "with nothing: the stream is empty".to_string()
            } else {
                head.join(" ")
            }
        )));
    };
    Ok((r, format_name(format)))
}

/// `image`'s error for a stream of format `name`, as an [`OpError`] naming the problem.
fn decode_error(name: &str, e: ImageError) -> OpError {
    match e {
        ImageError::Unsupported(e) => OpError::unsupported(format!(
            "ImageDecoder: {name} image: {e} (vkml decodes {SUPPORTED})"
        )),
        ImageError::Limits(e) => OpError::unsupported(format!(
            "ImageDecoder: the {name} image is larger than the decoder's limits allow: {e}"
        )),
        ImageError::IoError(e) if e.kind() == ErrorKind::UnexpectedEof => OpError::invalid(
            format!("ImageDecoder: the {name} stream is truncated: it ends before the image does"),
        ),
        e => OpError::invalid(format!("ImageDecoder: the {name} stream is malformed: {e}")),
    }
}

/// Pillow's `convert("L")` from RGB: L = (19595 R + 38470 G + 7471 B + 2^15) >> 16, the
/// ITU-R 601-2 weights 0.299, 0.587, 0.114 in 16-bit fixed point, rounded.
fn luma(r: u8, g: u8, b: u8) -> u8 {
    ((19595 * u32::from(r) + 38470 * u32::from(g) + 7471 * u32::from(b) + 0x8000) >> 16) as u8
}

impl ImageDecoder {
    /// The pixels, interleaved in this op's channel order.
    fn decode(&self, bytes: &[u8]) -> Result<(usize, usize, Vec<u8>), OpError> {
        let (r, name) = reader(bytes)?;
        let img = r.decode().map_err(|e| decode_error(name, e))?;
        let (w, h) = (img.width() as usize, img.height() as usize);
        let data = match (self.pixel_format, img) {
            // A grey image is its own luma: Pillow's `convert("L")` of mode L (or LA, alpha
            // dropped) keeps the values.
            (PixelFormat::Grayscale, DynamicImage::ImageLuma8(g)) => g.into_raw(),
            (PixelFormat::Grayscale, img) => img
                .to_rgb8()
                .pixels()
                .map(|p| luma(p[0], p[1], p[2]))
                .collect(),
            (PixelFormat::Rgb, img) => img.into_rgb8().into_raw(),
            (PixelFormat::Bgr, img) => {
                let mut v = img.into_rgb8().into_raw();
                for p in v.chunks_exact_mut(3) {
                    p.swap(0, 2);
                }
                v
            }
        };
        Ok((h, w, data))
    }
}

impl Op for ImageDecoder {
    fn infer(&self, inputs: &[Option<InferInput<'_>>]) -> Result<Vec<ValueType>, OpError> {
        let x = req(inputs, 0)?;
        if x.ty.dtype != DType::U8 || x.ty.shape.len() != 1 {
            return Err(OpError::invalid(format!(
                "ImageDecoder: encoded_stream must be a 1-D uint8 tensor (the file's bytes), \
                 found {}",
                x.ty
            )));
        }
        let Some(v) = x.value else {
            // The image's height and width are in its bytes.
            return Err(OpError::NeedsValue(0));
        };
        // The header alone gives the size; the pixels are decoded when the op runs.
        let (r, name) = reader(stream(v)?)?;
        let (w, h) = r.into_dimensions().map_err(|e| decode_error(name, e))?;
        Ok(vec![ValueType::new(
            DType::U8,
            vec![h as usize, w as usize, self.pixel_format.channels()],
        )])
    }

    fn run_cpu(
        &self,
        inputs: &[Option<&Tensor>],
        outputs: &[ValueType],
    ) -> Result<Vec<Tensor>, OpError> {
        let (h, w, data) = self.decode(stream(req(inputs, 0)?)?)?;
        let shape = vec![h, w, self.pixel_format.channels()];
        if outputs[0].shape != shape {
            // A header whose size disagrees with the decoded pixels (seen while planning).
            return Err(OpError::invalid(format!(
                "ImageDecoder: the image decodes to {shape:?}, but its header says {:?}",
                outputs[0].shape
            )));
        }
        Ok(vec![Tensor::from_vec(shape, data)])
    }

    fn flops(&self, inputs: &[Option<&ValueType>], outputs: &[ValueType]) -> u64 {
        // Entropy decoding and transforms: some tens of operations per output byte.
        let stream = inputs.first().copied().flatten().map_or(0, |t| t.numel());
        (stream as u64 + outputs[0].numel() as u64).saturating_mul(32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Attrs;
    use crate::attrs::AttrValue;
    use image::{ImageEncoder, Rgb, RgbImage, Rgba, RgbaImage};

    fn op(pixel_format: Option<&str>) -> Result<Box<dyn Op>, OpError> {
        let attrs = Attrs(
            pixel_format
                .map(|f| ("pixel_format".to_string(), AttrValue::String(f.into())))
                .into_iter()
                .collect(),
        );
        crate::build(&NodeSpec {
            name: "d",
            op_type: "ImageDecoder",
            attrs: &attrs,
            opset: 20,
            num_inputs: 1,
            num_outputs: 1,
        })
    }

    /// Infers with the value known, then runs: the graph layer's path for a known stream.
    fn decode(pixel_format: &str, bytes: &[u8]) -> Result<Tensor, OpError> {
        let o = op(Some(pixel_format))?;
        let x = Tensor::from_vec(vec![bytes.len()], bytes.to_vec());
        let ty = ValueType::of(&x);
        let out = o.infer(&[Some(InferInput {
            ty: &ty,
            value: Some(&x),
        })])?;
        Ok(o.run_cpu(&[Some(&x)], &out)?.remove(0))
    }

    fn pixels(t: &Tensor) -> Vec<u8> {
        t.view::<u8>().unwrap().into_owned()
    }

    /// A 3x2 binary PPM written by hand: red, green, blue / white, black, (10, 200, 30).
    fn ppm() -> Vec<u8> {
        let mut v = b"P6\n3 2\n255\n".to_vec();
        v.extend_from_slice(&[255, 0, 0, 0, 255, 0, 0, 0, 255]);
        v.extend_from_slice(&[255, 255, 255, 0, 0, 0, 10, 200, 30]);
        v
    }

    #[test]
    fn pnm_in_each_pixel_format() {
        let rgb = decode("RGB", &ppm()).unwrap();
        assert_eq!(rgb.shape(), &[2, 3, 3]);
        assert_eq!(pixels(&rgb)[..9], [255, 0, 0, 0, 255, 0, 0, 0, 255]);
        assert_eq!(pixels(&rgb)[15..], [10, 200, 30]);
        let bgr = decode("BGR", &ppm()).unwrap();
        assert_eq!(pixels(&bgr)[..9], [0, 0, 255, 0, 255, 0, 255, 0, 0]);
        assert_eq!(pixels(&bgr)[15..], [30, 200, 10]);
        // Pillow's convert("L") of these pixels: red 76, green 150, blue 29, white 255,
        // black 0, and (10*19595 + 200*38470 + 30*7471 + 32768) >> 16 = 124.
        let gray = decode("Grayscale", &ppm()).unwrap();
        assert_eq!(gray.shape(), &[2, 3, 1]);
        assert_eq!(pixels(&gray), [76, 150, 29, 255, 0, 124]);
    }

    #[test]
    fn default_is_rgb() {
        let o = op(None).unwrap();
        let bytes = ppm();
        let x = Tensor::from_vec(vec![bytes.len()], bytes);
        let ty = ValueType::of(&x);
        let out = o
            .infer(&[Some(InferInput {
                ty: &ty,
                value: Some(&x),
            })])
            .unwrap();
        assert_eq!(out, vec![ValueType::new(DType::U8, vec![2, 3, 3])]);
        let y = o.run_cpu(&[Some(&x)], &out).unwrap();
        assert_eq!(pixels(&y[0])[3..6], [0, 255, 0]);
    }

    fn png(w: u32, h: u32, data: &[u8], color: image::ExtendedColorType) -> Vec<u8> {
        let mut out = Vec::new();
        image::codecs::png::PngEncoder::new(&mut out)
            .write_image(data, w, h, color)
            .unwrap();
        out
    }

    #[test]
    fn png_rgb_rgba_and_grey() {
        let img = RgbImage::from_fn(4, 3, |x, y| Rgb([x as u8 * 60, y as u8 * 100, 7]));
        let bytes = png(4, 3, img.as_raw(), image::ExtendedColorType::Rgb8);
        let y = decode("RGB", &bytes).unwrap();
        assert_eq!(y.shape(), &[3, 4, 3]);
        // Row 2, column 3.
        assert_eq!(pixels(&y)[(2 * 4 + 3) * 3..][..3], [180, 200, 7]);
        let y = decode("BGR", &bytes).unwrap();
        assert_eq!(pixels(&y)[(2 * 4 + 3) * 3..][..3], [7, 200, 180]);

        // Alpha is dropped, not blended.
        let img = RgbaImage::from_pixel(2, 1, Rgba([10, 20, 30, 0]));
        let bytes = png(2, 1, img.as_raw(), image::ExtendedColorType::Rgba8);
        assert_eq!(
            pixels(&decode("RGB", &bytes).unwrap()),
            [10, 20, 30, 10, 20, 30]
        );

        // A grey image: RGB repeats the value, Grayscale keeps it.
        let bytes = png(2, 1, &[0, 77], image::ExtendedColorType::L8);
        assert_eq!(
            pixels(&decode("RGB", &bytes).unwrap()),
            [0, 0, 0, 77, 77, 77]
        );
        assert_eq!(pixels(&decode("Grayscale", &bytes).unwrap()), [0, 77]);
    }

    #[test]
    fn bmp_round_trips() {
        let img = RgbImage::from_fn(3, 2, |x, y| Rgb([x as u8, 100 + y as u8, 250]));
        let mut bytes = Vec::new();
        image::codecs::bmp::BmpEncoder::new(&mut bytes)
            .write_image(img.as_raw(), 3, 2, image::ExtendedColorType::Rgb8)
            .unwrap();
        let y = decode("RGB", &bytes).unwrap();
        assert_eq!(y.shape(), &[2, 3, 3]);
        assert_eq!(pixels(&y), img.into_raw());
    }

    #[test]
    fn jpeg_decodes_close_to_its_source() {
        // Flat colour at quality 100: the codec's loss is a rounding step or two.
        let img = RgbImage::from_pixel(16, 8, Rgb([200, 40, 90]));
        let mut bytes = Vec::new();
        image::codecs::jpeg::JpegEncoder::new_with_quality(&mut bytes, 100)
            .encode_image(&img)
            .unwrap();
        let y = decode("RGB", &bytes).unwrap();
        assert_eq!(y.shape(), &[8, 16, 3]);
        for p in pixels(&y).chunks(3) {
            for (got, want) in p.iter().zip([200u8, 40, 90]) {
                assert!(got.abs_diff(want) <= 2, "{p:?}");
            }
        }
        let g = decode("Grayscale", &bytes).unwrap();
        assert_eq!(g.shape(), &[8, 16, 1]);
        let want = luma(200, 40, 90);
        assert!(pixels(&g).iter().all(|v| v.abs_diff(want) <= 2));
    }

    #[test]
    fn needs_the_stream_value() {
        let o = op(None).unwrap();
        let ty = ValueType::new(DType::U8, vec![100]);
        assert_eq!(
            o.infer(&[Some(InferInput {
                ty: &ty,
                value: None
            })]),
            Err(OpError::NeedsValue(0))
        );
        let ty = ValueType::new(DType::F32, vec![100]);
        let e = o.infer(&[Some(InferInput {
            ty: &ty,
            value: None,
        })]);
        assert!(matches!(e, Err(OpError::Invalid(m)) if m.contains("1-D uint8")));
    }

    #[test]
    fn malformed_streams_are_named() {
        let e = decode("RGB", b"not an image at all").unwrap_err();
        assert!(
            matches!(&e, OpError::Invalid(m) if m.contains("not an image file")),
            "{e}"
        );
        let e = decode("RGB", &[]).unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");

        // A PNG cut after its header: the size is known, the pixels are not.
        let img = RgbImage::from_fn(8, 8, |x, y| Rgb([x as u8, y as u8, 0]));
        let bytes = png(8, 8, img.as_raw(), image::ExtendedColorType::Rgb8);
        let e = decode("RGB", &bytes[..bytes.len() - 20]).unwrap_err();
        assert!(e.to_string().contains("PNG"), "{e}");
        // A corrupted pixel stream.
        let mut bad = ppm();
        bad.truncate(bad.len() - 4);
        let e = decode("RGB", &bad).unwrap_err();
        assert!(e.to_string().contains("PNM"), "{e}");
        // A header with a nonsense size.
        let e = decode("RGB", b"P6\n0 -3\n255\n").unwrap_err();
        assert!(e.to_string().contains("PNM"), "{e}");

        let e = decode("RGB", b"\x00\x00\x00\x0cjP  \r\n\x87\n\x00\x00").unwrap_err();
        assert!(
            matches!(&e, OpError::Unsupported(m) if m.contains("JPEG 2000")),
            "{e}"
        );
        assert!(matches!(
            op(Some("RGBA")),
            Err(OpError::Invalid(m)) if m.contains("RGB, BGR or Grayscale")
        ));
    }
}
