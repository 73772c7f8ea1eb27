// elem.glsl: the element of a data-movement kernel, chosen by its SIZE only (data movement does
// not care what the bytes mean). A variant line defines EB, e.g. `// @variant b2 EB=2`, and the
// shader then uses
//     E              the element type: uint8_t, uint16_t, uint or uvec2 (8 bytes as two words,
//                    which needs no 64-bit feature)
//     E_WORDS(lo,hi) an element from two 32-bit words holding its little-endian bytes
//     E_LO(e)        the element's low 32 bits (zero-extended), E_HI(e) its high 32 bits
// Include after the shader's own #extension lines.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#if EB == 1
#extension GL_EXT_shader_8bit_storage : require
#define E uint8_t
#define E_WORDS(lo, hi) uint8_t((lo) & 0xFFu)
#define E_LO(e) uint(e)
#define E_HI(e) 0u
#elif EB == 2
#extension GL_EXT_shader_16bit_storage : require
#define E uint16_t
#define E_WORDS(lo, hi) uint16_t((lo) & 0xFFFFu)
#define E_LO(e) uint(e)
#define E_HI(e) 0u
#elif EB == 4
#define E uint
#define E_WORDS(lo, hi) (lo)
#define E_LO(e) (e)
#define E_HI(e) 0u
#elif EB == 8
#define E uvec2
#define E_WORDS(lo, hi) uvec2(lo, hi)
#define E_LO(e) (e).x
#define E_HI(e) (e).y
#else
#error "define EB as 1, 2, 4 or 8"
#endif
