from tests.train.conftest import datasets  # noqa: F401  (the small packed datasets, built once per session)
