zoo probe mqar --arch llama-3.2-1b --set n_layers=2 --set d_model=64 --set attention.n_heads=4 --set attention.n_kv_heads=4 --set attention.head_dim=16 --set ffn.kind=none --variant mha:attention.kind=gqa --variant gated_deltanet:attention.kind=gated_deltanet,attention.n_k_heads=4,attention.n_v_heads=4,attention.head_k_dim=16,attention.head_v_dim=16 --variant linear:attention.kind=linear --variant mamba2:attention.kind=mamba2,attention.head_dim=16,attention.state_size=16 --pairs 4,8 --seq-len 64 --vocab 256 --steps 2500 --batch-size 64 --lr 3e-3 --train-examples 20000 --threads 1 --jobs 2 --out results --name tiny
# Run 2026-11-25 on the shared 2-core CPU, one thread per variant, two at a time: 41 minutes.
# mha 129 s / 185 s, gated_deltanet 974 s / 985 s, linear 309 s / 366 s, mamba2 458 s / 350 s (pairs 4 / 8).
# Its mha, linear and mamba2 rows are the table's. Its gated_deltanet rows (recall 0.433 / 0.008) came from the old
# init (dt bias 1, transformers' checkpoint placeholder: every head forgot within a few tokens) and are replaced by
# the rerun after the fix at the same lr 3e-3 (mqar-tiny-gdn.command; also at lr 1e-3 in mqar-tiny-gdn-lr1e-3.command):
zoo probe mqar --from-jsonl results/mqar-tiny.jsonl --from-jsonl results/mqar-tiny-gdn.jsonl --out results --name tiny
