"""Patches of other libraries' models onto tilec's ops: `tilec.integrations.transformers`
(Hugging Face Llama, Mistral, Qwen2). Each needs its library and PyTorch, imported by that
module only."""
