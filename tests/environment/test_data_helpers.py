"""Every example of the original data_helpers page (seed 003), plus the dtype rules of nonify."""

import numpy as np
import pytest

from digideep.environment.data_helpers import (
    complete_dict_of_list,
    convert_time_to_batch_major,
    dict_of_lists_to_list_of_dicts,
    extract_keywise,
    flatten_dict,
    int_sentinel,
    join_keys,
    list_of_dicts_to_flattened_dict_of_lists,
    nonify,
    unflatten_dict,
    update_dict_of_lists,
)


def test_complete_dict_of_list_pads_short_lists_with_placeholders():
    dic = {
        "a": [1, 2, 3, 4],
        "b": [[None, None, None], [None, None, None], [None, None, None], [1, 2, 3]],
        "c": [[-1, -2], [-3, -4]],
    }
    assert complete_dict_of_list(dic, 4) == {
        "a": [1, 2, 3, 4],
        "b": [[None, None, None], [None, None, None], [None, None, None], [1, 2, 3]],
        "c": [[-1, -2], [-3, -4], [None, None], [None, None]],
    }


def test_convert_time_to_batch_major_page_example():
    episode = {
        "key1": [[[1], [2]], [[3], [4]], [[5], [6]], [[7], [8]], [[9], [10]]],
        "key2": [
            [[1, 2], [3, 4]],
            [[5, 6], [7, 8]],
            [[9, 10], [11, 12]],
            [[13, 14], [15, 16]],
            [[17, 18], [19, 20]],
        ],
    }
    out = convert_time_to_batch_major(episode)
    np.testing.assert_array_equal(
        out["key1"], np.array([[[1.0], [3.0], [5.0], [7.0], [9.0]], [[2.0], [4.0], [6.0], [8.0], [10.0]]])
    )
    np.testing.assert_array_equal(
        out["key2"],
        np.array(
            [
                [[1.0, 2.0], [5.0, 6.0], [9.0, 10.0], [13.0, 14.0], [17.0, 18.0]],
                [[3.0, 4.0], [7.0, 8.0], [11.0, 12.0], [15.0, 16.0], [19.0, 20.0]],
            ]
        ),
    )
    assert out["key1"].dtype == np.float32 and out["key2"].dtype == np.float32


def test_convert_time_to_batch_major_keeps_array_dtypes():
    out = convert_time_to_batch_major({"k": np.zeros((5, 2, 3), dtype=np.int64)})
    assert out["k"].shape == (2, 5, 3) and out["k"].dtype == np.int64


def test_dict_of_lists_to_list_of_dicts_page_example():
    dic = {"a1": ([1, 2], [3, 4], [5, 6]), "a2": ([9], [8], [7])}
    assert dict_of_lists_to_list_of_dicts(dic, 3) == [
        {"a1": [1, 2], "a2": [9]},
        {"a1": [3, 4], "a2": [8]},
        {"a1": [5, 6], "a2": [7]},
    ]


def test_dict_of_lists_to_list_of_dicts_refuses_wrong_count():
    with pytest.raises(ValueError, match="key 'a' has 2 items, expected num=3"):
        dict_of_lists_to_list_of_dicts({"a": [1, 2]}, 3)


def test_extract_keywise_page_example():
    dic = {"agent1": {"a": [1, 2], "b": {"c": 2, "d": 4}}, "agent2": {"a": [3, 4], "b": {"c": 9, "d": 7}}}
    assert extract_keywise(dic, "a") == {"agent1": [1, 2], "agent2": [3, 4]}


def test_flatten_dict_page_example():
    assert flatten_dict({"a": 1, "b": {"c": 1, "d": {"e": 2, "f": 3}}}) == {
        "/a": 1,
        "/b/c": 1,
        "/b/d/e": 2,
        "/b/d/f": 3,
    }


def test_unflatten_dict_page_example_and_round_trip():
    flat = {"/a": 1, "/b/c": 1, "/b/d/e": 2, "/b/d/f": 3}
    assert unflatten_dict(flat) == {"a": 1, "b": {"c": 1, "d": {"e": 2, "f": 3}}}
    assert flatten_dict(unflatten_dict(flat)) == flat


def test_unflatten_dict_refuses_a_key_that_is_also_a_prefix():
    with pytest.raises(ValueError, match="'/a/b' runs through 'a'"):
        unflatten_dict({"/a": 1, "/a/b": 2})


def test_join_keys_page_example():
    assert join_keys("/agent1", "artifcats") == "/agent1/artifcats"
    assert join_keys("", "x") == "/x"
    assert join_keys("/a/", "/b") == "/a/b"


def test_list_of_dicts_to_flattened_dict_of_lists_page_example():
    data = [
        {"a": {"f": [1, 2], "g": [7, 8]}, "b": [-1, -2], "info": [10, 20]},
        {"a": {"f": [3, 4], "g": [9, 8]}, "b": [-3, -4], "step": [80, 90]},
    ]
    # The page printed keys without their leading '/'; its text (unix-style paths) is followed.
    assert list_of_dicts_to_flattened_dict_of_lists(data, 2) == {
        "/a/f": [[1, 2], [3, 4]],
        "/a/g": [[7, 8], [9, 8]],
        "/b": [[-1, -2], [-3, -4]],
        "/info": [[10, 20], [None, None]],
        "/step": [[None, None], [80, 90]],
    }


def test_nonify_page_example_keeps_tuples_and_lists():
    result = nonify([(1, 2, 3), (1, 2, 4, 5, [-1, -2])])
    assert result == [(None, None, None), (None, None, None, None, [None, None])]
    assert isinstance(result[0], tuple) and isinstance(result[1][4], list)


def test_nonify_keeps_array_dtypes_honest():
    floats = nonify(np.ones((2, 3), dtype=np.float32))
    assert floats.dtype == np.float32 and floats.shape == (2, 3) and np.isnan(floats).all()
    ints = nonify(np.ones(4, dtype=np.int64))
    assert (
        ints.dtype == np.int64
        and (ints == int_sentinel(np.int64)).all()
        and int_sentinel(np.int64) == -(2**63)
    )
    unsigned = nonify(np.ones(2, dtype=np.uint8))
    assert (unsigned == 0).all()
    bools = nonify(np.ones(3, dtype=bool))
    assert bools.dtype == bool and not bools.any()
    assert np.isnan(nonify(np.float32(1.5)))


def test_nonify_refuses_dicts():
    with pytest.raises(TypeError, match="flatten it first"):
        nonify([{"a": 1}])


def test_update_dict_of_lists_page_example():
    dic = {"a": [1, 2, 3], "c": [[-1, -2], [-3, -4]]}
    assert update_dict_of_lists(dic, {"a": 4, "b": [1, 2, 3]}, index=3) == {
        "a": [1, 2, 3, 4],
        "b": [[None, None, None], [None, None, None], [None, None, None], [1, 2, 3]],
        "c": [[-1, -2], [-3, -4]],  # not complete yet: complete_dict_of_list pads it
    }
