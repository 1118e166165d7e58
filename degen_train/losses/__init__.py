"""The loss terms: what a model is trained on, and everything a term is made of. Start here.

    contract.py      LossTerm (setup, prepare_batch, forward -> TermOutput), register_term, TermContext,
                     distributed_mean (a global-batch mean under DDP, FSDP2 and accumulation), WeightedSum
    declarations.py  every term as its file declares it, read without importing it (the command line's checks)
    catalog.py       the files found by their declarations, imported; term_specs (checked, none built) and
                     build_terms(config sections)
    section.py       TermSection: the typed section a term's options sit in (their roles: each term's annotations)
    options.py       a term's options checked against its constructor's annotations, named as the config names them
    accumulation.py  the window of micro-batches a mean divides by (data/windows.py reads the window)

Objectives (conf/objective/):  mlm.py  nsp.py  mle.py  electra.py  coco_clm.py  agg.py
Regularizers (conf/regularizer/):  cosreg.py  tacl.py  coco_scl.py  simcse.py  simctg.py  unlikelihood.py  istar.py
spectrum.py  dispersion.py
Helpers they share:  chunked_ce.py (the output layer and cross-entropy in chunks), compiled_head.py (the head and
its cross-entropy as one compiled graph), corruption.py (a generator's replacements, for ELECTRA and COCO-LM)

The backbone's forward pass hands every term a ForwardOutput (degen_train/models/output.py). Adding a term:
one file, one yaml and one test (docs/adding-a-loss.md).
"""
