import gc
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "devkit.shop.settings")
if os.environ.get("SHOP_GC_DISABLED") == "1":  # nothing may rely on the garbage collector
    gc.disable()
application = get_wsgi_application()
