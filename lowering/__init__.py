"""tilec's compiler back half: tile-IR passes, the pass pipeline, gpu dialect, codegen, PTX."""
