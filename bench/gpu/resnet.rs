//! The ResNet50-like workload: ResNet50's convolutions expressed as the
//! matrix products an im2col lowering would run.
//!
//! A convolution with `C_out` filters of size `C_in x k x k` producing an
//! `H x W` map over `B` images becomes `C[M x N] = A[M x K] * B[K x N]` with
//! `M = C_out`, `K = C_in * k * k` and `N = B * H * W`. Only the shapes matter
//! to the probe (it times cuBLAS, not a real network), so batch norm, ReLU,
//! pooling and the im2col copies themselves are left out.

/// One convolution (or the final fully connected layer, as a 1x1 conv over a 1x1 map).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConvLayer {
    pub name: String,
    pub out_channels: usize,
    pub in_channels: usize,
    pub kernel: usize,
    /// Side of the (square) output feature map.
    pub out_hw: usize,
}

/// Shape of a column-major GEMM `C[m x n] = A[m x k] * B[k x n]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

impl GemmShape {
    /// Floating-point operations (a multiply-add counts as two).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

impl ConvLayer {
    /// The im2col GEMM for this layer at `batch` images.
    pub fn gemm(&self, batch: usize) -> GemmShape {
        GemmShape {
            m: self.out_channels,
            n: batch * self.out_hw * self.out_hw,
            k: self.in_channels * self.kernel * self.kernel,
        }
    }

    /// Number of weights (the `A` matrix), i.e. the parameters a LOAD copies.
    pub fn weights(&self) -> usize {
        self.out_channels * self.in_channels * self.kernel * self.kernel
    }
}

/// One ResNet50 stage of bottleneck blocks.
struct Stage {
    blocks: usize,
    mid_channels: usize,
    out_channels: usize,
    out_hw: usize,
}

const STAGES: [Stage; 4] = [
    Stage {
        blocks: 3,
        mid_channels: 64,
        out_channels: 256,
        out_hw: 56,
    },
    Stage {
        blocks: 4,
        mid_channels: 128,
        out_channels: 512,
        out_hw: 28,
    },
    Stage {
        blocks: 6,
        mid_channels: 256,
        out_channels: 1024,
        out_hw: 14,
    },
    Stage {
        blocks: 3,
        mid_channels: 512,
        out_channels: 2048,
        out_hw: 7,
    },
];

/// Input of one bottleneck block.
struct BlockInput {
    channels: usize,
    hw: usize,
}

fn conv(
    name: String,
    out_channels: usize,
    in_channels: usize,
    kernel: usize,
    out_hw: usize,
) -> ConvLayer {
    ConvLayer {
        name,
        out_channels,
        in_channels,
        kernel,
        out_hw,
    }
}

/// Appends a bottleneck block (1x1 reduce, 3x3, 1x1 expand, plus the
/// projection shortcut on a stage's first block).
fn push_bottleneck(
    layers: &mut Vec<ConvLayer>,
    prefix: &str,
    input: &BlockInput,
    stage: &Stage,
    first: bool,
) {
    // ResNet v1.5 (torchvision's) puts the stride on the 3x3 conv, so the
    // first 1x1 runs at the block's input resolution.
    layers.push(conv(
        format!("{prefix}.reduce"),
        stage.mid_channels,
        input.channels,
        1,
        input.hw,
    ));
    layers.push(conv(
        format!("{prefix}.3x3"),
        stage.mid_channels,
        stage.mid_channels,
        3,
        stage.out_hw,
    ));
    layers.push(conv(
        format!("{prefix}.expand"),
        stage.out_channels,
        stage.mid_channels,
        1,
        stage.out_hw,
    ));
    if first {
        layers.push(conv(
            format!("{prefix}.shortcut"),
            stage.out_channels,
            input.channels,
            1,
            stage.out_hw,
        ));
    }
}

/// ResNet50's 53 convolutions plus the classifier: 54 GEMMs, ~25.5M weights.
pub fn resnet50() -> Vec<ConvLayer> {
    let mut layers = vec![conv("conv1".to_owned(), 64, 3, 7, 112)];
    // After conv1 (stride 2) and the 3x3 max-pool (stride 2).
    let mut input = BlockInput {
        channels: 64,
        hw: 56,
    };
    for (s, stage) in STAGES.iter().enumerate() {
        for b in 0..stage.blocks {
            let prefix = format!("stage{}.block{}", s + 2, b + 1);
            push_bottleneck(&mut layers, &prefix, &input, stage, b == 0);
            input = BlockInput {
                channels: stage.out_channels,
                hw: stage.out_hw,
            };
        }
    }
    layers.push(conv("fc".to_owned(), 1000, 2048, 1, 1));
    layers
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_resnet50_layer_count() {
        assert_eq!(resnet50().len(), 54);
    }

    #[test]
    fn weight_count_matches_resnet50() {
        // ResNet50 has 25.56M parameters, ~25.50M of them conv/fc weights.
        let weights: usize = resnet50().iter().map(ConvLayer::weights).sum();
        assert!((25_000_000..25_600_000).contains(&weights), "{weights}");
    }

    #[test]
    fn work_matches_resnet50_and_scales_with_batch() {
        // ResNet50 is ~4.1 GMAC (~8.2 GFLOP) per 224x224 image.
        let flops = |batch| {
            resnet50()
                .iter()
                .map(|l| l.gemm(batch).flops())
                .sum::<f64>()
        };
        assert!((7.8e9..8.4e9).contains(&flops(1)), "{}", flops(1));
        assert!((flops(16) / flops(1) - 16.0).abs() < 1e-9);
    }
}
