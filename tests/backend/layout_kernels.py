"""Kernels of the layout tests (kernels need a source file of their own)."""
import tilec as tc


@tc.kernel
def argmax_rows_of_reshape(a, out):
    # a (1, 16) load reshaped to (2, 8) takes explicit (linear) bases; argmax over its rows
    # builds an index tile expanded to (2, 1) in them
    x = tc.load(a, index=(0, 0), shape=(1, 16), padding=0.0)
    t = tc.argmax(tc.reshape(x, (2, 8)), axis=0)
    tc.store(out, index=(0, 0), tile=tc.expand_dims(t, 0))
