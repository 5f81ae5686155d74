"""Records the kernels the stdlib entry points launch (their modules' `launch`), for tests
that assert which path a shape takes."""


def spy_launches(monkeypatch, modules, record):
    """Wraps `launch` in each of `modules`; returns the list that gets `record(kernel, cluster,
    constexprs)` of every launch, in order."""
    seen = []
    for mod in modules:
        def spy(kernel, grid, args, num_warps=4, fast_math=True, cluster=1, _real=mod.launch, **constexprs):
            seen.append(record(kernel, cluster, constexprs))
            return _real(kernel, grid, args, num_warps, fast_math, cluster, **constexprs)
        monkeypatch.setattr(mod, "launch", spy)
    return seen
