zoo probe mqar --arch llama-3.2-1b --set n_layers=2 --set d_model=64 --set attention.n_heads=4 --set attention.n_kv_heads=4 --set attention.head_dim=16 --set ffn.hidden=128 --variant gqa:attention.kind=gqa --variant linear:attention.kind=linear --variant mamba2:attention.kind=mamba2,attention.head_dim=16,attention.state_size=16 --variant gated_deltanet:attention.kind=gated_deltanet,attention.n_k_heads=4,attention.n_v_heads=4,attention.head_k_dim=16,attention.head_v_dim=16 --pairs 4,16 --seq-len 64 --vocab 256 --steps 1000 --batch-size 32 --lr 3e-3 --train-examples 20000 --threads 1 --jobs 2 --out results --name tiny
# Run 2026-11-25 on the shared 2-core CPU (load average ~20), stopped at the time budget: only the
# rows in mqar-tiny.md finished (pairs=4: gqa and linear; mamba2 and gated_deltanet were still
# training after 40 minutes each, pairs=16 never started). 1,000 steps of 32 sequences (32k
# examples) are ~200x fewer than Zoology's budget (64 epochs of 100k examples): attention has
# not learned the task (recall 0.235, where a converged 2-layer attention is near 1.0), so these
# rows do NOT show the published ordering; they show the unconverged plateau.
