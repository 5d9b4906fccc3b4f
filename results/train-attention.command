# zoo compare with training runs (issue 28); 1 thread on a shared 2-core CPU, torch 2.13 CPU, 47 s wall
zoo compare --arch llama-3.2-1b --set n_layers=2 --set d_model=128 --set attention.n_heads=8 \
    --set attention.n_kv_heads=2 --set attention.head_dim=16 --set ffn.hidden=512 --set vocab_size=256 \
    --attention mha,gqa,mqa \
    --train-tokens 200000 --train-text bench/data/stdlib-3.11.py.txt --threads 1 --save train-attention \
    --train-dir /tmp/train-attn
