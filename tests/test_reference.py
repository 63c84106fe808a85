"""Issue-12 defaults and ``:reference`` (the published ConvLuna code): each field does what it says."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lra.defaults import make_config
from lra.model import Encoder, EncoderBlock, PixelEmbed, build_model
from lra.training.checks import ConfigError, validate_config
from test_all_configs import CONFIGS, load

REFERENCE_DOC = Path(__file__).resolve().parent.parent / "docs" / "reference.md"
MEMORY_CONFIGS = sorted(p for p in CONFIGS.glob("*_*luna.py"))


def _model(attention="luna", task="listops", dual=False, classes=10, **model):
    c = make_config(task, attention, "smoke")
    c.model.update(model)
    return c, build_model(c.model, 300, classes, dual)


def _tokens(b=3, n=20, lengths=(12, 20, 5), seed=0):
    t = np.random.default_rng(seed).integers(1, 16, size=(b, n)).astype(np.int32)
    for i, length in enumerate(lengths):
        t[i, length:] = 0
    return t


def _param_shapes(model, tokens):
    """The parameter tree's shapes, traced only (the tests that check only those compile nothing)."""
    return jax.eval_shape(model.init, jax.random.key(0), tokens)["params"]


# ----------------------------------------------------------------------------- defaults


@pytest.mark.parametrize("scale", [1.0, 64**-0.5])
def test_memory_init_scale_is_the_standard_deviation(scale):
    _, model = _model(emb_dim=64, qkv_dim=64, memory_init_scale=scale, attention_kwargs={"memory_size": 256})
    memory = jax.jit(model.init)(jax.random.key(0), _tokens())["params"]["encoder"]["memory"]  # one program
    assert memory.shape == (256, 64)
    assert abs(float(np.std(memory)) / scale - 1.0) < 0.03  # 16k draws: std within ~1%


def test_default_initial_memory_is_unit_normal():
    assert make_config("listops", "luna").model.memory_init_scale == 1.0


@pytest.mark.parametrize("activation,fn", [("gelu", jax.nn.gelu), ("relu", jax.nn.relu)])
@pytest.mark.parametrize("layers", [1, 2])
def test_head_is_dense_activation_stack(activation, fn, layers):
    cfg, model = _model("softmax", head_activation=activation, head_hidden_layers=layers)
    tokens = _tokens()
    params = model.init(jax.random.key(0), tokens)["params"]
    h = Encoder(cfg.model, 300).apply({"params": params["encoder"]}, tokens)
    for name in ["head_hidden", "head_hidden2"][:layers]:
        h = fn(h @ params[name]["kernel"] + params[name]["bias"])
    expected = h @ params["logits"]["kernel"] + params["logits"]["bias"]
    np.testing.assert_allclose(np.asarray(model.apply({"params": params}, tokens)), np.asarray(expected), atol=1e-5)
    assert ("head_hidden2" in params) == (layers == 2) and "head_hidden3" not in params


def test_default_head_activation_is_gelu_for_every_config():
    for path in sorted(CONFIGS.glob("*_*.py")):
        assert load(path).model.head_activation == "gelu", path.name


@pytest.mark.parametrize("path", [p for p in MEMORY_CONFIGS if p.stem.startswith("matching")], ids=lambda p: p.stem)
@pytest.mark.parametrize("arg", ["", "reference"])
def test_memory_family_matching_concatenates_u_and_v(path, arg):
    config = load(path, ",".join(filter(None, ["smoke", arg])))
    assert config.model.dual_combine == "concat"
    model = build_model(config.model, 300, 2, True)
    docs = np.stack([_tokens(), _tokens(seed=3)], axis=1)
    kernel = _param_shapes(model, docs)["head_hidden"]["kernel"]
    assert kernel.shape[0] == 2 * config.model.emb_dim


def test_transformer_matching_keeps_lras_combination():
    assert load(CONFIGS / "matching_transformer.py").model.dual_combine == "concat_mul_sub"


@pytest.mark.parametrize("residual_dropout", [False, True])
def test_attention_residual_dropout(residual_dropout):
    """A Luna block's memory path (P' = LN(P + packed)) has no FFN: with attention dropout 0 its
    only dropout is the residual one, so train-mode and eval-mode memories agree exactly when it
    is off, and differ when it is on."""
    cfg, _ = _model(
        "luna", norm="post", dropout_rate=0.5, attention_dropout_rate=0.0, attention_residual_dropout=residual_dropout
    )
    block = EncoderBlock(cfg.model)
    x = jax.random.normal(jax.random.key(1), (3, 20, 32))
    mask = jnp.asarray(_tokens() != 0)
    memory = jax.random.normal(jax.random.key(2), (3, 16, 32))

    @jax.jit  # one program, not the block's layers op by op
    def run(x, mask, memory):
        params = block.init(jax.random.key(0), x, mask, memory, True)
        _, train = block.apply(params, x, mask, memory, False, rngs={"dropout": jax.random.key(3)})
        _, evaluate = block.apply(params, x, mask, memory, True)
        return train, evaluate

    train, evaluate = run(x, mask, memory)
    assert np.allclose(np.asarray(train), np.asarray(evaluate), atol=1e-6) == (not residual_dropout)


def test_memory_family_configs_have_no_residual_dropout():
    for path in MEMORY_CONFIGS:
        assert load(path).model.attention_residual_dropout is False, path.name
    assert load(CONFIGS / "listops_transformer.py").model.attention_residual_dropout is True


@pytest.mark.parametrize("pooling", ["cls", "memory"])
def test_pre_pool_norm_normalises_what_is_pooled(pooling):
    cfg, model = _model("luna", norm="pre", pooling=pooling, pre_pool_norm=True)
    tokens = _tokens()
    params = model.init(jax.random.key(0), tokens)["params"]
    pooled = np.asarray(Encoder(cfg.model, 300).apply({"params": params["encoder"]}, tokens))
    if pooling == "cls":  # one LayerNormed vector (scale 1, bias 0 at init): mean 0, variance 1
        np.testing.assert_allclose(pooled.mean(-1), 0.0, atol=1e-5)
        np.testing.assert_allclose(pooled.var(-1), 1.0, atol=1e-3)
    else:  # the mean of LayerNormed cells: mean 0 over features
        np.testing.assert_allclose(pooled.mean(-1), 0.0, atol=1e-5)
    assert "pool_norm" in params["encoder"]


def test_mask_padding_off_lets_padding_change_the_result():
    tokens = _tokens()
    longer = np.concatenate([tokens, np.zeros((3, 7), np.int32)], axis=1)
    outputs = {}
    for masked in (True, False):
        _, model = _model("convluna", norm="post", pooling="memory", mask_padding=masked)
        v = model.init(jax.random.key(0), longer)
        outputs[masked] = (np.asarray(model.apply(v, tokens)), np.asarray(model.apply(v, longer)))
    np.testing.assert_allclose(*outputs[True], atol=2e-5)
    assert not np.allclose(*outputs[False], atol=1e-3)
    full = np.random.default_rng(1).integers(1, 16, size=tokens.shape).astype(np.int32)  # no padding: no difference
    _, on = _model("convluna", norm="post", pooling="memory")
    _, off = _model("convluna", norm="post", pooling="memory", mask_padding=False)
    v = on.init(jax.random.key(0), full)
    np.testing.assert_allclose(np.asarray(on.apply(v, full)), np.asarray(off.apply(v, full)), atol=1e-6)


def test_pixel_embedding_is_affine_in_the_normalised_pixel():
    module = PixelEmbed(8, 0.48, 0.24)
    tokens = jnp.asarray([[1, 129, 256]])  # pixel values 0, 128, 255
    params = module.init(jax.random.key(0), tokens)
    w, b = np.asarray(params["params"]["weight"]), np.asarray(params["params"]["bias"])
    pixels = (np.array([0, 128, 255]) / 255 - 0.48) / 0.24
    np.testing.assert_allclose(np.asarray(module.apply(params, tokens))[0], pixels[:, None] * w + b, rtol=1e-5)


def test_linear_embedding_is_for_pixels_only():
    c = make_config("listops", "softmax", "smoke")
    c.model.embedding = "linear"
    with pytest.raises(ConfigError, match="embedding='linear'.*task 'listops'"):
        validate_config(c)


@pytest.mark.parametrize(
    "field,value",
    [
        ("memory_init_scale", float("nan")),
        ("memory_init_scale", 0.0),
        ("head_activation", "tanh"),
        ("head_hidden_layers", -1),
    ],
)
def test_bad_model_fields_are_refused(field, value):
    c = make_config("listops", "luna", "smoke")
    c.model[field] = value
    with pytest.raises(ConfigError, match=field):
        validate_config(c)


# ----------------------------------------------------------------------------- :reference


def test_reference_switches_every_documented_field():
    text = load(CONFIGS / "text_convluna.py", "reference,mem=256")
    assert text.variant == "ConvLuna-256 (reference)"
    m, kw = text.model, dict(text.model.attention_kwargs)
    assert (m.mask_padding, m.attention_residual_dropout, m.embedding_dropout, m.pre_pool_norm) == (
        False,
        False,
        False,
        True,
    )
    assert kw == dict(
        filter="maxpool",
        kernel_size=4,
        stride=1,
        memory_size=256,
        filter_padding="valid",
        share_projections="qko",
        scale_unpacking=False,
    )
    assert (m.gelu_approximate, m.zero_padding_embedding, m.cls_position, m.param_init) == (
        False,
        True,
        False,
        "pytorch",
    )
    assert text.data.buckets == ()  # the code pads every batch to the full length
    assert text.data.lra_val_is_test is True and m.pooling == "memory"
    assert load(CONFIGS / "text_convluna.py", "cpu,reference").data.buckets == ()
    listops = load(CONFIGS / "listops_convluna.py", "reference")
    assert "filter_padding" not in listops.model.attention_kwargs  # conv, stride 1: 'same' in the code too
    assert listops.weight_decay == 0.002
    luna = load(CONFIGS / "listops_luna.py", "reference")
    assert luna.model.pooling == "cls" and luna.model.attention_kwargs.share_projections is True
    matching = load(CONFIGS / "matching_luna.py", "reference")
    assert matching.model.num_layers == 6 and matching.model.pre_pool_norm is False
    assert load(CONFIGS / "matching_luna.py", "reference,cpu").model.num_layers == 2  # presets keep their sizes
    image = load(CONFIGS / "image_convluna.py", "reference")
    assert (image.model.embedding, image.model.head_hidden_layers) == ("linear", 2)


def test_reference_defaults_are_the_paper_text_without_it():
    c = load(CONFIGS / "text_convluna.py")
    assert (c.model.mask_padding, c.model.pre_pool_norm, c.data.lra_val_is_test) == (True, False, False)
    assert c.model.param_init == "xavier"
    assert load(CONFIGS / "listops_luna.py").weight_decay == 0.01


def test_options_after_reference_win():
    c = load(CONFIGS / "listops_convluna.py", "reference,scale_unpacking=true")
    assert c.model.attention_kwargs.scale_unpacking is True


@pytest.mark.parametrize("name,attention", [("listops_clustered", "clustered"), ("text_transformer", "softmax")])
def test_reference_is_refused_for_families_the_code_does_not_run(name, attention):
    with pytest.raises(ValueError, match=f"reference.*'{attention}'"):
        load(CONFIGS / f"{name}.py", "reference")


@pytest.mark.parametrize("embedding_dropout", [False, True])
def test_embedding_dropout(embedding_dropout):
    """The first block's attention input (LN of the embeddings; pre-LN) sees only the embedding
    dropout: train and eval agree there iff it is off."""
    cfg = make_config("listops", "softmax", "smoke")
    cfg.model.update(dropout_rate=0.5, embedding_dropout=embedding_dropout)
    enc, tokens = Encoder(cfg.model, 300), _tokens()
    params = enc.init(jax.random.key(0), tokens)
    probe = lambda mdl, _: mdl.name == "attention_norm"  # noqa: E731
    _, train = enc.apply(params, tokens, False, rngs={"dropout": jax.random.key(1)}, capture_intermediates=probe)
    _, evaluate = enc.apply(params, tokens, True, capture_intermediates=probe)
    get = lambda s: np.asarray(s["intermediates"]["block_0"]["attention_norm"]["__call__"][0])  # noqa: E731
    assert np.allclose(get(train), get(evaluate), atol=1e-6) == (not embedding_dropout)


def test_reference_parameter_sharing():
    """The published code: ConvLuna shares W^Q, W^K, W^O (no W^V); Luna one module for both."""
    c = load(CONFIGS / "listops_convluna.py", "smoke,reference")
    params = _param_shapes(build_model(c.model, 16, 10, False), _tokens())
    attn = params["encoder"]["block_0"]["attention"]
    assert set(attn) == {"query", "key", "out", "filter_kernel", "log_temperature"}
    c = load(CONFIGS / "listops_luna.py", "smoke,reference")
    params = _param_shapes(build_model(c.model, 16, 10, False), _tokens())
    assert set(params["encoder"]["block_0"]["attention"]) == {"query", "key", "value", "out"}


@pytest.mark.parametrize("path", MEMORY_CONFIGS, ids=lambda p: p.stem)
def test_reference_configs_validate_and_run_a_forward_pass(path):
    config = load(path, "smoke,reference")
    validate_config(config)
    dual = config.task == "matching"
    tokens = np.stack([_tokens(), _tokens(seed=2)], axis=1) if dual else _tokens()
    model = build_model(config.model, 300, 2, dual)
    logits = model.apply(model.init(jax.random.key(0), tokens), tokens)
    assert logits.shape == (3, 2) and np.all(np.isfinite(np.asarray(logits)))


def test_readme_divergence_table_is_the_registry():
    from lra.reference_config import divergence_table

    page = REFERENCE_DOC.read_text()
    section = page[page.index("## Divergences from the published code") :]
    assert (
        divergence_table() in section
    ), "docs/reference.md's table differs: paste lra.reference_config.divergence_table()"


@pytest.mark.parametrize(
    "path", sorted(CONFIGS.glob("listops_*.py")) + sorted(CONFIGS.glob("text_*luna.py")), ids=lambda p: p.stem
)
def test_every_default_model_ignores_padding(path):
    """The new defaults (N(0, 1) memory, GELU head, no residual dropout for memory families) keep
    the whole model padding invariant, for every family."""
    config = load(path, "smoke")
    model = build_model(config.model, 16, 10, False)
    tokens = _tokens()
    longer = np.concatenate([tokens, np.zeros((3, 9), np.int32)], axis=1)
    v = model.init(jax.random.key(0), longer)
    rngs = {"attention": jax.random.key(0)}
    np.testing.assert_allclose(
        np.asarray(model.apply(v, tokens, rngs=rngs)), np.asarray(model.apply(v, longer, rngs=rngs)), atol=5e-5
    )


@pytest.mark.parametrize("grid", ["convluna_table1", "convluna_table3", "memory_degradation"])
def test_sweep_grids_use_the_papers_matching_head(grid):
    from lra.defaults import load_config_file
    from lra_lab.experiments import sweep

    for run in sweep.expand(grid, "paper", tasks=["matching"], seeds=[0]):
        config = load_config_file(run.config_path).get_config(run.config_arg)
        expected = "concat_mul_sub" if config.model.attention == "softmax" else "concat"
        assert config.model.dual_combine == expected, run.variant.label


def test_old_run_configs_rebuild_the_model_they_trained(tmp_path):
    """A config.json recorded before the issue-12 fields existed reads back with the old behaviour."""
    import json

    from lra.defaults import LEGACY_FIELDS, upgrade_run_config
    from lra.training.run_files import load_run_config

    record = load(CONFIGS / "listops_convluna.py", "smoke").to_dict()
    for dotted in LEGACY_FIELDS:
        *parents, name = dotted.split(".")
        node = record
        for parent in parents:
            node = node[parent]
        del node[name]
    (tmp_path / "config.json").write_text(json.dumps(record))
    old = load_run_config(tmp_path)
    assert old.model.memory_init_scale == old.model.emb_dim**-0.5
    assert (old.model.head_activation, old.model.attention_residual_dropout, old.log_memory_stats) == (
        "relu",
        True,
        False,
    )
    validate_config(old)
    new = load(CONFIGS / "listops_convluna.py", "smoke")
    assert upgrade_run_config(new).to_dict() == new.to_dict()  # present fields are kept


@pytest.mark.parametrize("field", ["num_train", "num_val", "num_test"])
def test_empty_generated_splits_are_refused(field):
    c = make_config("listops", "softmax", "smoke")
    c.data[field] = 0
    with pytest.raises(ConfigError, match=f"config.data.{field} must be a positive integer"):
        validate_config(c)


def test_cudnn_softmax_needs_bf16_and_no_attention_dropout():
    c = make_config("listops", "softmax", "smoke,implementation=cudnn")
    with pytest.raises(ConfigError, match="attention_dropout_rate"):
        validate_config(c)
    c.model.attention_dropout_rate = 0.0
    with pytest.raises(ConfigError, match="dtype=bfloat16"):
        validate_config(c)
    c.model.dtype = "bfloat16"
    validate_config(c)


# ----------------------------------------------------------------------------- the code's embedding details


def test_gelu_form_per_family():
    """Table 2's GELU is exact for the memory families (as the published code's nn.GELU()); the
    other rows keep LRA's Flax tanh approximation; reference is exact."""
    for path in sorted(CONFIGS.glob("*_*.py")):
        config = load(path)
        assert config.model.gelu_approximate is (config.model.attention not in ("luna", "convluna")), path.name
    assert load(CONFIGS / "listops_luna.py", "reference").model.gelu_approximate is False


@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_approximate_switches_ffn_and_head(approximate):
    cfg, model = _model("softmax", gelu_approximate=approximate)
    tokens = _tokens()
    params = model.init(jax.random.key(0), tokens)["params"]
    h = Encoder(cfg.model, 300).apply({"params": params["encoder"]}, tokens)
    h = jax.nn.gelu(h @ params["head_hidden"]["kernel"] + params["head_hidden"]["bias"], approximate=approximate)
    expected = h @ params["logits"]["kernel"] + params["logits"]["bias"]
    np.testing.assert_allclose(np.asarray(model.apply({"params": params}, tokens)), np.asarray(expected), atol=1e-5)
    _, other = _model("softmax", gelu_approximate=not approximate)
    assert not np.allclose(np.asarray(other.apply({"params": params}, tokens)), np.asarray(expected), atol=1e-7)


def test_zero_padding_embedding_is_fixed_zero():
    """padding_idx=0: with masks off, padding still enters the model, but as a zero vector whose
    row gets no gradient."""
    cfg, model = _model("luna", mask_padding=False, zero_padding_embedding=True)
    tokens = _tokens()
    params = model.init(jax.random.key(0), tokens)["params"]
    moved = jax.tree.map(lambda a: a, params)
    moved["encoder"]["embed"]["embedding"] = (
        params["encoder"]["embed"]["embedding"].at[0].add(jax.random.normal(jax.random.key(9), (cfg.model.emb_dim,)))
    )  # not a constant: LayerNorm removes those
    np.testing.assert_array_equal(
        np.asarray(model.apply({"params": params}, tokens)), np.asarray(model.apply({"params": moved}, tokens))
    )
    grads = jax.jit(jax.grad(lambda p: model.apply({"params": p}, tokens).sum()))(params)  # one program: suite time
    assert not np.any(np.asarray(grads["encoder"]["embed"]["embedding"][0]))
    _, learned = _model("luna", mask_padding=False)  # the default: a learned padding row that matters
    assert not np.allclose(
        np.asarray(learned.apply({"params": params}, tokens)),
        np.asarray(learned.apply({"params": moved}, tokens)),
        atol=1e-4,
    )


def test_cls_without_position():
    """cls_position=False: the table has max_len rows, token i gets row i and [CLS] none."""
    cfg, model = _model("luna", pooling="cls", cls_position=False)
    tokens = _tokens()
    params = model.init(jax.random.key(0), tokens)["params"]["encoder"]
    assert params["pos_embedding"].shape[0] == cfg.model.max_len
    probe = lambda mdl, _: mdl.name == "block_0"  # noqa: E731
    enc = Encoder(cfg.model, 300)
    _, state = enc.apply({"params": params}, tokens, capture_intermediates=probe, mutable=["intermediates"])
    shifted = dict(params, pos_embedding=params["pos_embedding"] + 1.0)  # moves every token, not [CLS]
    _, moved = enc.apply({"params": shifted}, tokens, capture_intermediates=probe, mutable=["intermediates"])
    assert not np.allclose(
        np.asarray(state["intermediates"]["block_0"]["__call__"][0][0]),
        np.asarray(moved["intermediates"]["block_0"]["__call__"][0][0]),
    )
    with_pos, _ = _model("luna", pooling="cls")
    assert (
        _param_shapes(build_model(with_pos.model, 300, 10, False), tokens)["encoder"]["pos_embedding"].shape[0]
        == cfg.model.max_len + 1
    )


def test_pytorch_init_draws_as_torch_defaults():
    from lra.model import init_params

    cfg, model = _model("luna", pooling="cls", emb_dim=64, qkv_dim=64, mlp_dim=128, param_init="pytorch")
    tokens = _tokens()
    init = jax.jit(init_params, static_argnums=0)  # one program per model, not op by op
    params = init(model, jax.random.key(0), tokens)
    enc = params["encoder"]
    mlp = enc["block_0"]["mlp"]["Dense_0"]
    amax = lambda a: float(np.max(np.abs(np.asarray(a))))  # noqa: E731  (NumPy: no eager programs to compile)
    for leaf in (mlp["kernel"], mlp["bias"]):  # Linear(64, 128): U(+-1/8)
        assert amax(leaf) <= 1 / 8 and amax(leaf) > 0.9 / 8
    out = enc["block_0"]["attention"]["pack"]["out"]  # W^O: H x Dh = 64 inputs
    assert amax(out["bias"]) <= 1 / 8 and amax(out["bias"]) > 0.5 / 8
    assert not np.any(np.asarray(enc["pos_embedding"]))
    assert 0.9 * (3 / 64) ** 0.5 < amax(enc["cls"]) <= (3 / 64) ** 0.5
    default = init(
        build_model(_model("luna", pooling="cls", emb_dim=64, qkv_dim=64, mlp_dim=128)[0].model, 300, 10, False),
        jax.random.key(0),
        tokens,
    )
    assert not np.any(np.asarray(default["encoder"]["block_0"]["mlp"]["Dense_0"]["bias"]))  # xavier: zero biases
    np.testing.assert_array_equal(np.asarray(default["encoder"]["memory"]), np.asarray(enc["memory"]))  # kept
