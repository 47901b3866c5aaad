"""Input errors: one place, one reason."""

from __future__ import annotations


def test_an_input_error_survives_pickling_with_its_place_and_reason():
    import pickle

    from rollmux.errors import InputError
    err = pickle.loads(pickle.dumps(InputError("--sections", "unknown section 'x'")))
    assert (err.place, err.reason, str(err)) == ("--sections", "unknown section 'x'", "--sections: unknown section 'x'")
