"""A small vision transformer for MNIST, written as an xbench user would write it: the same
network in PyTorch and in Keras, for
`xbench grid --preset smoke --model examples/vit_mnist.py --backend pt-ddp,pt-fsdp,tf-mirrored`
(on MNIST, the smoke grid's data, channels first in PyTorch and last in Keras, as each framework's
loop gives them; a data() of its own would go to both alike, so both would take one shape).

The 28x28 image is cut into 16 patches of 7x7, each embedded (a strided convolution) with a
learned position, through two pre-LayerNorm encoder layers (4 heads, width 64, an MLP twice as
wide), averaged over the patches and classified. Each function imports its framework itself, so
a backend of one framework never loads the other. Each framework draws its own initial weights:
xbench does not claim one trajectory across frameworks for a model file.
"""
PATCH, WIDTH, HEADS, LAYERS, CLASSES = 7, 64, 4, 2, 10
PATCHES = (28 // PATCH) ** 2


def pytorch():
    import torch
    from torch import nn

    class VisionTransformer(nn.Module):
        def __init__(self):
            super().__init__()
            self.patches = nn.Conv2d(1, WIDTH, PATCH, stride=PATCH)
            self.position = nn.Parameter(torch.zeros(1, PATCHES, WIDTH))
            layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 2 * WIDTH, dropout=0.0,
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, CLASSES)

        def forward(self, images):
            x = self.patches(images).flatten(2).transpose(1, 2) + self.position
            return self.head(self.norm(self.encoder(x)).mean(1))

    # images as PyTorch takes them: channels first
    return {"model": VisionTransformer(), "inputs": ((1, 28, 28), "float32"),
            "classes": CLASSES, "targets": ()}


def keras():
    import keras

    class AddPosition(keras.layers.Layer):
        def build(self, shape):
            self.position = self.add_weight(shape=shape[1:], initializer="zeros")

        def call(self, x):
            return x + self.position

    images = keras.Input((28, 28, 1))
    x = keras.layers.Conv2D(WIDTH, PATCH, strides=PATCH)(images)
    x = AddPosition()(keras.layers.Reshape((PATCHES, WIDTH))(x))
    for _ in range(LAYERS):
        h = keras.layers.LayerNormalization(epsilon=1e-5)(x)
        x = x + keras.layers.MultiHeadAttention(HEADS, WIDTH // HEADS)(h, h)
        h = keras.layers.LayerNormalization(epsilon=1e-5)(x)
        h = keras.layers.Dense(2 * WIDTH, activation="relu")(h)
        x = x + keras.layers.Dense(WIDTH)(h)
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization(epsilon=1e-5)(x))
    # images as Keras takes them: channels last
    return {"model": keras.Model(images, keras.layers.Dense(CLASSES)(x)),
            "inputs": ((28, 28, 1), "float32"), "classes": CLASSES, "targets": ()}
