"""watch_time: the (made-up) Player Insights team's pipelines, shipped to kappa as a zip.

Nothing here imports kappa: a pipeline is a function from DataFrames to DataFrames.
"""
