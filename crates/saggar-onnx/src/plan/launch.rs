//! Launch shapes: how many blocks and threads each kind of work ([`Work`]) gets, and the dynamic
//! shared memory of row-group launches.

use saggar_device::{Dim3, LaunchConfig};

use crate::ops::gpu::{BLOCK, ROW_CACHE_BYTES, ROW_LANES, TILE, Work};

/// Rows from which row-group kernels take a warp a row (2048 warps: about 16 on each SM of an H100).
const ROW_GROUP_MIN_ROWS: u64 = 2048;

/// Blocks of an elementwise launch at most. Its threads stride over the elements, so each thread's
/// setup (reading `meta`, testing the vector path) is paid once for many elements rather than once
/// for a few; 2048 blocks of [`BLOCK`] threads fill an H100's 132 SMs twice over. Measured on an
/// H100 (GELU over 25M f32): 175 us with a block per 256 elements, 100 us with 2048 blocks.
const ELEMENT_BLOCKS: u64 = 2048;

/// The launch shape of `work`.
pub(crate) fn launch_config(work: Work) -> LaunchConfig {
    const MAX_BLOCKS: u64 = 65_535;
    let blocks = |n: u64| n.clamp(1, MAX_BLOCKS) as u32;
    match work {
        Work::Elements(n) => LaunchConfig::for_elements(n.clamp(1, ELEMENT_BLOCKS * BLOCK as u64), BLOCK),
        Work::Rows(r) => {
            LaunchConfig { grid: Dim3::x(blocks(r)), block: Dim3::x(BLOCK), shared_mem_bytes: 0, programmatic: false }
        }
        // A warp a row while that makes enough warps to fill the GPU; below, a block a row, of
        // up to one thread per 8 columns. The block's rows stay in dynamic shared memory while they
        // fit (the kernel tests the same bound).
        Work::RowGroups { rows, cols } if rows >= ROW_GROUP_MIN_ROWS => {
            let groups = BLOCK / ROW_LANES;
            LaunchConfig {
                grid: Dim3::x(blocks(rows.div_ceil(u64::from(groups)))),
                block: Dim3 { x: ROW_LANES, y: groups, z: 1 },
                shared_mem_bytes: row_cache_bytes(groups, cols),
                programmatic: false,
            }
        }
        Work::RowGroups { rows, cols } => {
            let lanes = cols.div_ceil(8).next_power_of_two().clamp(u64::from(ROW_LANES), u64::from(BLOCK));
            LaunchConfig {
                grid: Dim3::x(blocks(rows)),
                block: Dim3::x(lanes as u32),
                shared_mem_bytes: row_cache_bytes(1, cols),
                programmatic: false,
            }
        }
        // Threads over a row's columns up to a block, the rest of the block over rows (no more rows
        // a block than there are).
        Work::Columns { rows, cols } => {
            let x = cols.clamp(1, u64::from(BLOCK)).next_power_of_two();
            let y = (u64::from(BLOCK) / x).min(rows.clamp(1, u64::from(BLOCK)).next_power_of_two());
            LaunchConfig {
                grid: Dim3::x(blocks(rows.div_ceil(y))),
                block: Dim3 { x: x as u32, y: y as u32, z: 1 },
                shared_mem_bytes: 0,
                programmatic: false,
            }
        }
        Work::Tiles { m, n, batch } => {
            let t = TILE as u64;
            LaunchConfig {
                grid: Dim3 { x: blocks(n.div_ceil(t)), y: blocks(m.div_ceil(t)), z: blocks(batch) },
                block: Dim3 { x: TILE, y: TILE, z: 1 },
                shared_mem_bytes: 0,
                programmatic: false,
            }
        }
    }
}

/// Dynamic shared memory of a row-group launch of `groups` rows of `cols` a block: the rows, when
/// they fit [`ROW_CACHE_BYTES`] (the bound the kernels test to use it), else none.
fn row_cache_bytes(groups: u32, cols: u64) -> u32 {
    let bytes = u64::from(groups).saturating_mul(cols).saturating_mul(4);
    if bytes <= ROW_CACHE_BYTES { bytes as u32 } else { 0 }
}

/// The launch shape of every host kernel (it runs once per launch).
pub(crate) fn host_config() -> LaunchConfig {
    LaunchConfig::for_elements(1, 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A row-group launch reserves its rows' shared memory exactly when the kernels' own test
    /// (`cols * blockDim.y * 4 <= ONNX_ROW_CACHE_BYTES`) says they keep rows there.
    #[test]
    fn row_group_launches_reserve_the_rows_the_kernels_cache() {
        let prelude_bound = format!("#define ONNX_ROW_CACHE_BYTES {}", ROW_CACHE_BYTES);
        assert!(crate::ops::gpu::PRELUDE.contains(&prelude_bound));
        for (rows, cols) in [(12, 5), (12, 12_288), (12, 12_289), (4096, 768), (4096, 1536), (4096, 1537), (1, 0)] {
            let config = launch_config(Work::RowGroups { rows, cols });
            let cached = cols * u64::from(config.block.y) * 4 <= ROW_CACHE_BYTES;
            let expected = if cached { cols * u64::from(config.block.y) * 4 } else { 0 };
            assert_eq!(u64::from(config.shared_mem_bytes), expected, "{rows} rows of {cols}");
        }
    }
}
