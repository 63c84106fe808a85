"""Loaders of text (IMDB), matching (AAN) and image (CIFAR-10) on tiny fixtures in each upstream format."""

from __future__ import annotations

import dataclasses
import io
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lra.data import bytes_tokenizer, image, matching, prepare, task_shapes, text, tfrecord
from lra.data.types import DataError
from lra.defaults import task_config

# ----------------------------------------------------------------------------------------- fixtures


def make_config(task: str, root: Path, **data):
    config = task_config(task)
    config.data_dir = str(root)
    for key, value in data.items():
        config.data[key] = value
    return config


SPECIAL_DOCS = [
    b"  \n Caf\xc3\xa9 \xff\x00 tab\there  \n",  # UTF-8 and non-UTF-8 bytes, NUL; surrounding whitespace
    b"x" * 40,  # longer than the tests' max_len: truncated
]


def imdb_docs() -> dict[str, dict[str, list[tuple[str, bytes]]]]:
    """{split: {label: [(file name, raw file bytes)]}}: 10 reviews per class in train, 3 in test."""
    docs = {}
    for split, per_class in (("train", 10), ("test", 3)):
        docs[split] = {}
        for label in ("neg", "pos"):
            items = [
                (f"{i:03d}_{7 if label == 'pos' else 2}.txt", f"{split} {label} review {i}".encode())
                for i in range(per_class)
            ]
            docs[split][label] = items
    docs["train"]["pos"][0] = ("000_9.txt", SPECIAL_DOCS[0])
    docs["train"]["neg"][1] = ("001_1.txt", SPECIAL_DOCS[1])
    return docs


def write_aclimdb(root: Path) -> None:
    for split, per_label in imdb_docs().items():
        for label, items in per_label.items():
            folder = root / "aclImdb" / split / label
            folder.mkdir(parents=True)
            for name, raw in items:
                (folder / name).write_bytes(raw)
    (root / "aclImdb" / "train" / "unsup").mkdir()  # ignored, as in the real release
    (root / "aclImdb" / "train" / "unsup" / "0_0.txt").write_bytes(b"unlabelled")


def write_tfds_imdb(root: Path) -> None:
    """imdb_reviews/plain_text as tensorflow-datasets writes it, examples in aclImdb's order."""
    folder = root / "tensorflow_datasets" / "imdb_reviews" / "plain_text" / "1.0.0"
    folder.mkdir(parents=True)
    for split, per_label in imdb_docs().items():
        examples = [
            tfrecord.encode_example({"text": [raw.strip()], "label": [label]})
            for label, name in enumerate(("neg", "pos"))
            for _, raw in sorted(per_label[name])
        ]
        half = len(examples) // 2  # two shards, to test shard order
        for i, part in enumerate((examples[:half], examples[half:])):
            tfrecord.write_records(folder / f"imdb_reviews-{split}.tfrecord-{i:05d}-of-00002", part)
    (folder / "dataset_info.json").write_text("{}")


def aan_text(i: int) -> bytes:
    return repr(f'Paper {i}: "quoted" text\nwith a newline'.encode()).encode()  # a b'...' literal


def write_aan(root: Path, nested: bool = False) -> Path:
    folder = root / "lra_release" / ("lra_release" if nested else "") / "tsv_data"
    folder.mkdir(parents=True)
    for split, n in (("train", 6), ("eval", 3), ("test", 4)):
        lines = [
            b"\t".join([b"1.0" if i % 2 else b"0", b"id%d" % i, b"id%d" % (i + 1), aan_text(i), aan_text(i + 1)])
            for i in range(n)
        ]
        (folder / f"new_aan_pairs.{split}.tsv").write_bytes(b"\n".join(lines) + b"\n")
    return folder


def cifar_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random CIFAR rows (N x 3072, channel-major) and labels; image 0 holds known pixels."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    for pixel, rgb in enumerate([(200, 100, 50), (0, 1, 0), (0, 0, 0), (255, 255, 255)]):
        data[0, [pixel, 1024 + pixel, 2048 + pixel]] = rgb
    return data, rng.integers(0, 10, n)


CIFAR_BATCHES = {f"data_batch_{i}": cifar_images(4, i) for i in range(1, 6)} | {"test_batch": cifar_images(6, 9)}


def write_cifar_pickles(root: Path) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for name, (data, labels) in CIFAR_BATCHES.items():
        batch = {b"batch_label": name.encode(), b"labels": labels.tolist(), b"data": data, b"filenames": []}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))


def write_cifar_bin(root: Path) -> None:
    folder = root / "cifar-10-batches-bin"
    folder.mkdir(parents=True)
    for name, (data, labels) in CIFAR_BATCHES.items():
        (folder / f"{name}.bin").write_bytes(np.concatenate([labels[:, None].astype(np.uint8), data], 1).tobytes())


def png(row: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(row.reshape(3, 32, 32).transpose(1, 2, 0)).save(buf, format="PNG")
    return buf.getvalue()


def write_tfds_cifar(root: Path) -> None:
    folder = root / "tensorflow_datasets" / "cifar10" / "3.0.2"
    folder.mkdir(parents=True)
    for split, names in (("train", [f"data_batch_{i}" for i in range(1, 6)]), ("test", ["test_batch"])):
        data = np.concatenate([CIFAR_BATCHES[n][0] for n in names])
        labels = np.concatenate([CIFAR_BATCHES[n][1] for n in names])
        records = [
            tfrecord.encode_example(
                {"id": [b"%s_%05d" % (split.encode(), i)], "image": [png(row)], "label": [int(lab)]}
            )
            for i, (row, lab) in enumerate(zip(data, labels, strict=False))
        ]
        tfrecord.write_records(folder / f"cifar10-{split}.tfrecord-00000-of-00001", records)


# ------------------------------------------------------------------------------------- tfrecord


def test_crc32c_check_value_and_vectorised_agree():
    assert tfrecord.crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    rng = np.random.default_rng(0)
    bufs = [rng.bytes(int(n)) for n in rng.integers(0, 200, 300)] + [b""]
    np.testing.assert_array_equal(tfrecord.crc32c_many(bufs, chunk=64), [tfrecord.crc32c(b) for b in bufs])


def test_tfrecord_roundtrip_and_corruption(tmp_path):
    records = [b"", b"a", bytes(range(256)) * 3]
    path = tmp_path / "x.tfrecord"
    tfrecord.write_records(path, records)
    blob = path.read_bytes()
    # framing by the spec: length, masked crc of length, data, masked crc of data
    assert struct.unpack("<Q", blob[0:8])[0] == 0 and struct.unpack("<Q", blob[16:24])[0] == 1  # record 0 is 16 bytes

    def masked(crc: int) -> int:  # the spec's formula, written out independently of the module
        return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

    assert struct.unpack("<I", blob[8:12])[0] == masked(tfrecord.crc32c(blob[0:8]))
    assert struct.unpack("<I", blob[29:33])[0] == masked(tfrecord.crc32c(b"a"))
    assert tfrecord.read_records(path) == records
    damaged = bytearray(blob)
    damaged[-10] ^= 1  # a byte inside the last record's data
    path.write_bytes(bytes(damaged))
    with pytest.raises(tfrecord.RecordError, match="CRC mismatch in the data of record 2"):
        tfrecord.read_records(path)
    path.write_bytes(blob[:-3])
    with pytest.raises(tfrecord.RecordError, match="truncated"):
        tfrecord.read_records(path)


def _example_class():
    """tf.train.Example built from a descriptor with the protobuf library (independent of our codec)."""
    pytest.importorskip("google.protobuf")
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FileDescriptorProto(name="example_test.proto", package="t", syntax="proto3")
    F = descriptor_pb2.FieldDescriptorProto
    for name, ftype in (("BytesList", F.TYPE_BYTES), ("FloatList", F.TYPE_FLOAT), ("Int64List", F.TYPE_INT64)):
        f.message_type.add(name=name).field.add(name="value", number=1, type=ftype, label=F.LABEL_REPEATED)
    feature = f.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, name in enumerate(("bytes_list", "float_list", "int64_list"), 1):
        type_name = ".t." + name.title().replace("_", "")
        feature.field.add(
            name=name, number=number, type=F.TYPE_MESSAGE, type_name=type_name, label=F.LABEL_OPTIONAL, oneof_index=0
        )
    features = f.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    entry.field.add(name="value", number=2, type=F.TYPE_MESSAGE, type_name=".t.Feature", label=F.LABEL_OPTIONAL)
    features.field.add(
        name="feature", number=1, type=F.TYPE_MESSAGE, type_name=".t.Features.FeatureEntry", label=F.LABEL_REPEATED
    )
    f.message_type.add(name="Example").field.add(
        name="features", number=1, type=F.TYPE_MESSAGE, type_name=".t.Features", label=F.LABEL_OPTIONAL
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Example"))


def test_example_codec_matches_protobuf():
    Example = _example_class()
    ex = Example()
    ex.features.feature["text"].bytes_list.value.extend([b"caf\xc3\xa9", b"\xff\x00"])
    ex.features.feature["label"].int64_list.value.extend([1, -3, 2**40])
    ex.features.feature["score"].float_list.value.extend([0.5, -2.0])
    expected = {"text": [b"caf\xc3\xa9", b"\xff\x00"], "label": [1, -3, 2**40], "score": [0.5, -2.0]}
    assert tfrecord.parse_example(ex.SerializeToString()) == expected
    ours = Example.FromString(tfrecord.encode_example(expected))
    assert list(ours.features.feature["text"].bytes_list.value) == expected["text"]
    assert list(ours.features.feature["label"].int64_list.value) == expected["label"]
    assert list(ours.features.feature["score"].float_list.value) == expected["score"]


# ------------------------------------------------------------------------------------------ text


def expected_imdb(split: str, max_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    docs = [
        (label, raw.strip()) for label, name in enumerate(("neg", "pos")) for _, raw in sorted(imdb_docs()[split][name])
    ]
    tokens, lengths = bytes_tokenizer.encode([d for _, d in docs], max_len)
    return tokens, lengths, np.array([label for label, _ in docs])


def test_text_from_aclimdb(tmp_path, capsys):
    write_aclimdb(tmp_path)
    data = text.load(make_config("text", tmp_path, max_len=20))
    assert (data.vocab_size, data.num_classes, data.max_len, data.dual) == (257, 2, 20, False)
    assert task_shapes("text") == (data.vocab_size, data.num_classes, data.dual)  # preflight's shapes
    tokens, lengths, labels = expected_imdb("test", 20)
    np.testing.assert_array_equal(data.test.inputs, tokens)
    np.testing.assert_array_equal(data.test.lengths, lengths)
    np.testing.assert_array_equal(data.test.labels, labels)
    assert data.test.labels.tolist() == [0, 0, 0, 1, 1, 1]
    # 10% stratified validation carved from the 20 training reviews: one per class
    assert (len(data.train), len(data.validation), len(data.test)) == (18, 2, 6)
    assert sorted(data.validation.labels.tolist()) == [0, 1]
    rows = np.concatenate([data.train.inputs, data.validation.inputs])
    row_lengths = np.concatenate([data.train.lengths, data.validation.lengths])
    train_docs = {bytes_tokenizer.decode(r) for r in rows}
    assert train_docs == {bytes_tokenizer.decode(r) for r in expected_imdb("train", 20)[0]}
    assert not train_docs & {bytes_tokenizer.decode(r) for r in data.test.inputs}
    # bytes shifted by one (non-ASCII and NUL included), whitespace stripped like tfds, zero padding
    i = next(i for i, r in enumerate(rows) if r[0] == ord("C") + 1)
    doc = b"Caf\xc3\xa9 \xff\x00 tab\there"
    assert rows[i].tolist() == [b + 1 for b in doc] + [0] * (20 - len(doc)) and row_lengths[i] == len(doc)
    # the 40-byte review is truncated to max_len
    i = next(i for i, r in enumerate(rows) if r[0] == ord("x") + 1)
    assert rows[i].tolist() == [ord("x") + 1] * 20 and row_lengths[i] == 20
    assert data.train.inputs.dtype == np.uint16
    assert "tokenising IMDB" in capsys.readouterr().err


def test_text_validation_options(tmp_path):
    write_aclimdb(tmp_path)
    a = text.load(make_config("text", tmp_path, max_len=16, val_fraction=0.2))
    b = text.load(make_config("text", tmp_path, max_len=16, val_fraction=0.2))
    c = text.load(make_config("text", tmp_path, max_len=16, val_fraction=0.2, val_seed=1))
    np.testing.assert_array_equal(a.validation.inputs, b.validation.inputs)  # deterministic
    assert len(a.validation) == 4 and sorted(a.validation.labels.tolist()) == [0, 0, 1, 1]
    assert not np.array_equal(a.validation.inputs, c.validation.inputs)
    lra = text.load(make_config("text", tmp_path, max_len=16, lra_val_is_test=True))
    assert len(lra.train) == 20
    np.testing.assert_array_equal(lra.validation.inputs, lra.test.inputs)
    with pytest.raises(ValueError, match="val_fraction"):
        text.load(make_config("text", tmp_path, max_len=16, val_fraction=1.5))


def test_text_from_tfds_matches_aclimdb(tmp_path):
    write_aclimdb(tmp_path / "a")
    write_tfds_imdb(tmp_path / "b")
    acl = text.load(make_config("text", tmp_path / "a", max_len=16))
    tfds = text.load(make_config("text", tmp_path / "b", max_len=16, format="tfds"))
    for split in ("train", "validation", "test"):
        for field in ("inputs", "labels", "lengths"):
            np.testing.assert_array_equal(getattr(getattr(acl, split), field), getattr(getattr(tfds, split), field))


def test_text_missing_and_incomplete(tmp_path):
    with pytest.raises(DataError) as e:
        text.load(make_config("text", tmp_path))
    msg = str(e.value)
    assert str(tmp_path / "aclImdb" / "train" / "pos") in msg and "imdb_reviews" in msg
    assert "aclImdb_v1.tar.gz" in msg and "python -m lra.data prepare text" in msg
    assert f"to fix: run `python -m lra.data download text --data_dir {tmp_path}`" in msg  # the one command first
    write_aclimdb(tmp_path)
    for f in (tmp_path / "aclImdb" / "test" / "neg").iterdir():
        f.unlink()
    (tmp_path / "aclImdb" / "test" / "neg").rmdir()
    with pytest.raises(DataError, match=str(tmp_path / "aclImdb" / "test" / "neg")):
        text.load(make_config("text", tmp_path))


def test_text_corrupt_tfrecord_names_file(tmp_path):
    write_tfds_imdb(tmp_path)
    shard = next((tmp_path / "tensorflow_datasets").rglob("imdb_reviews-test.tfrecord-00001-of-00002"))
    blob = bytearray(shard.read_bytes())
    blob[20] ^= 0xFF
    shard.write_bytes(bytes(blob))
    with pytest.raises(DataError, match="imdb_reviews-test.tfrecord-00001-of-00002.*CRC"):
        text.load(make_config("text", tmp_path, max_len=16))


# -------------------------------------------------------------------------------------- matching


def test_matching_loads_pairs(tmp_path):
    write_aan(tmp_path)
    data = matching.load(make_config("matching", tmp_path, max_len=32))
    assert (data.vocab_size, data.num_classes, data.max_len, data.dual) == (257, 2, 32, True)
    assert task_shapes("matching") == (data.vocab_size, data.num_classes, data.dual)
    assert (len(data.train), len(data.validation), len(data.test)) == (6, 3, 4)
    assert data.train.inputs.shape == (6, 2, 32) and data.train.lengths.shape == (6, 2)
    assert data.validation.labels.tolist() == [0, 1, 0]
    for j, doc in enumerate((aan_text(2), aan_text(3))):  # raw field bytes, b'...' literal included
        assert bytes_tokenizer.decode(data.train.inputs[2, j]) == doc[:32]
        assert data.train.lengths[2, j] == 32
    short = matching.load(make_config("matching", tmp_path, max_len=1000))
    assert short.test.lengths[0, 0] == len(aan_text(0)) < 1000
    assert (short.test.inputs[0, 0, len(aan_text(0)) :] == 0).all()


def test_matching_unescape_and_nested_release(tmp_path):
    write_aan(tmp_path, nested=True)
    data = matching.load(make_config("matching", tmp_path, max_len=1000, aan_unescape=True))
    assert bytes_tokenizer.decode(data.train.inputs[1, 0]) == b'Paper 1: "quoted" text\nwith a newline'


def test_matching_malformed_line_names_file_and_line(tmp_path):
    folder = write_aan(tmp_path)
    path = folder / "new_aan_pairs.eval.tsv"
    lines = path.read_bytes().split(b"\n")
    lines[2] = b"1\tid1\tid2\tonly one text"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=f"{path}:3: expected 5 tab-separated fields.*found 4"):
        matching.load(make_config("matching", tmp_path, max_len=16))
    lines[2] = b"2\ta\tb\tc\td"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(DataError, match=f"{path}:3: label b'2' is not 0 or 1"):
        matching.load(make_config("matching", tmp_path, max_len=16))


def test_matching_missing_file(tmp_path):
    folder = write_aan(tmp_path)
    (folder / "new_aan_pairs.test.tsv").unlink()
    with pytest.raises(DataError) as e:
        matching.load(make_config("matching", tmp_path))
    assert str(folder / "new_aan_pairs.test.tsv") in str(e.value)
    assert "lra_release.gz" in str(e.value) and "python -m lra.data prepare matching" in str(e.value)
    assert "python -m lra.data download matching" in str(e.value)


# ----------------------------------------------------------------------------------------- image


def test_grayscale_hand_computed_pixels():
    rgb = np.array([(200, 100, 50), (0, 1, 0), (100, 150, 200), (255, 255, 255)], np.uint8).T
    # lra: trunc(255.5 * (0.2989 R + 0.5870 G + 0.1140 B) / 255)
    #   (200,100,50): 124.18 * 255.5/255 = 124.42 -> 124;  (0,1,0): 0.588 -> 0;  (100,150,200): 141.02 -> 141
    assert image.grayscale(*rgb, "lra").tolist() == [124, 0, 141, 255]
    # pil: (19595 R + 38470 G + 7471 B + 32768) >> 16
    #   (200,100,50): 8172318 >> 16 = 124;  (0,1,0): 71238 >> 16 = 1;  (100,150,200): 9256968 >> 16 = 141
    assert image.grayscale(*rgb, "pil").tolist() == [124, 1, 141, 255]


def test_grayscale_pil_matches_pillow():
    rgb = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    ours = image.grayscale(rgb[..., 0], rgb[..., 1], rgb[..., 2], "pil")
    np.testing.assert_array_equal(ours, np.asarray(Image.fromarray(rgb).convert("L")))


def test_image_from_pickles(tmp_path):
    write_cifar_pickles(tmp_path)
    data = image.load(make_config("image", tmp_path))
    assert (data.vocab_size, data.num_classes, data.max_len, data.dual) == (257, 10, 1024, False)
    assert task_shapes("image") == (data.vocab_size, data.num_classes, data.dual)
    assert (len(data.train), len(data.validation), len(data.test)) == (18, 2, 6)  # last 10% of train
    train_rows = np.concatenate([CIFAR_BATCHES[f"data_batch_{i}"][0] for i in range(1, 6)])
    train_labels = np.concatenate([CIFAR_BATCHES[f"data_batch_{i}"][1] for i in range(1, 6)])
    gray = image.grayscale(*train_rows.reshape(-1, 3, 1024).transpose(1, 0, 2), "lra")
    np.testing.assert_array_equal(data.train.inputs, gray[:18].astype(np.uint16) + 1)
    np.testing.assert_array_equal(data.validation.inputs, gray[18:].astype(np.uint16) + 1)
    np.testing.assert_array_equal(data.validation.labels, train_labels[18:])
    assert data.train.inputs[0, :4].tolist() == [125, 1, 1, 256]  # hand-computed pixels + 1; black is a token
    assert (data.test.lengths == 1024).all() and data.test.inputs.min() >= 1


def test_image_sources_agree_and_options(tmp_path):
    write_cifar_pickles(tmp_path / "py")
    write_cifar_bin(tmp_path / "bin")
    write_tfds_cifar(tmp_path / "tfds")
    ref = image.load(make_config("image", tmp_path / "py"))
    for root in ("bin", "tfds"):
        other = image.load(make_config("image", tmp_path / root))
        for split in ("train", "validation", "test"):
            np.testing.assert_array_equal(getattr(ref, split).inputs, getattr(other, split).inputs)
            np.testing.assert_array_equal(getattr(ref, split).labels, getattr(other, split).labels)
    pil = image.load(make_config("image", tmp_path / "py", grayscale="pil"))
    assert pil.train.inputs[0, 1] == 2  # (0,1,0) rounds up under PIL's rounding
    small = image.load(make_config("image", tmp_path / "py", image_downsample=4, max_len=80))
    assert small.train.inputs.shape == (18, 80) and (small.train.lengths == 64).all()
    assert (small.train.inputs[:, 64:] == 0).all()
    px = ref.train.inputs[0].reshape(32, 32)[:4, :4].astype(int) - 1
    assert small.train.inputs[0, 0] == (px.sum() + 8) // 16 + 1
    with pytest.raises(ValueError, match="max_len=64 is shorter than the 1024 pixels"):
        image.load(make_config("image", tmp_path / "py", max_len=64))


def test_image_refuses_foreign_pickle_and_missing(tmp_path):
    with pytest.raises(DataError) as e:
        image.load(make_config("image", tmp_path))
    assert "cifar-10-python.tar.gz" in str(e.value) and str(tmp_path / "cifar-10-batches-py") in str(e.value)
    assert "python -m lra.data download image" in str(e.value)
    write_cifar_pickles(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    path.write_bytes(pickle.dumps({b"data": print}, protocol=2))  # a global that is not numpy
    with pytest.raises(DataError, match=f"malformed CIFAR-10 batch {path}.*refusing to load .*print"):
        image.load(make_config("image", tmp_path))


# ------------------------------------------------------------------------------- cache and prepare


def test_cache_is_built_once_and_reused(tmp_path, monkeypatch, capsys):
    write_aclimdb(tmp_path)
    config = make_config("text", tmp_path, max_len=16)
    first = text.load(config)
    entry = text.cache_entry(config)
    assert (entry / "meta.json").is_file() and (entry / "train.inputs.npy").is_file()
    assert not list(entry.parent.glob(".*tmp*"))  # the temporary folder was renamed into place
    capsys.readouterr()
    monkeypatch.setattr(text, "_read_split", lambda *a: pytest.fail("re-tokenised despite the cache"))
    second = text.load(config)
    assert "tokenising" not in capsys.readouterr().err
    assert isinstance(second.test.inputs, np.memmap)
    np.testing.assert_array_equal(first.train.inputs, second.train.inputs)
    assert text.cache_entry(make_config("text", tmp_path, max_len=17)) != entry  # settings are in the key


def test_prepare_command_summarises_and_caches(tmp_path, capsys):
    write_aan(tmp_path)
    rc = prepare.main(["prepare", "matching", "--data_dir", str(tmp_path), "--max_len", "24"])
    out = capsys.readouterr().out
    assert rc == 0
    entry = matching.cache_entry(prepare.make_config("matching", str(tmp_path), 24))
    assert f"cache: {entry}" in out and (entry / "meta.json").is_file()
    assert "two inputs" in out and "validation" in out and "warning: train: 6 examples, the published" in out
    assert prepare.main(["prepare", "matching", "--data_dir", str(tmp_path), "--max_len", "24", "--force"]) == 0
    assert "tokenising" in capsys.readouterr().err


def test_prepare_reports_missing_data(tmp_path, capsys):
    rc = prepare.main(["prepare", "image", "--data_dir", str(tmp_path), "--no_download"])
    err = capsys.readouterr().err
    assert rc == 2 and "cifar-10-python.tar.gz" in err and "python -m lra.data prepare image" in err


def test_prepare_check_flags_broken_arrays(tmp_path):
    write_cifar_pickles(tmp_path)
    data = image.load(make_config("image", tmp_path))
    errors, warnings = prepare.check(data, {"train+validation": 50_000})
    assert not errors and any("50000" in w for w in warnings)
    bad = data.train.inputs.copy()
    bad[3, 5] = 0  # padding inside a full-length image
    broken = dataclasses.replace(data, train=dataclasses.replace(data.train, inputs=bad))
    errors, _ = prepare.check(broken, {})
    assert any("example 3" in e for e in errors)
