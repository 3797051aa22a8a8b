def test_imports():
    import iclr25_shared

    assert iclr25_shared.__version__
